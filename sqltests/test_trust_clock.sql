-- Trust boundary: the test clock (sql/00_schema.sql, jobs.now(); docs/design/roles.md).
-- jobs.fake_now is honoured only for a superuser or the schema owner. A worker or a
-- producer login that sets it (to 2100, to outlive every lease and rate window, or to
-- 1970, to run every delayed job now) is refused with setting_refused (SJ019) by every
-- call that reads the clock, and no table changes. The superuser's clock still works.
-- Logged in as each role: session_user is what jobs.now() checks.
begin;
select plan(25);

create role tbc_worker login in role sqljobs_worker;
create role tbc_producer login in role sqljobs_producer;

-- setup, as the superuser at 2030: a job another worker runs (30 s lease), a job
-- delayed an hour, a live named lease
set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform pg_catalog.set_config('tbc.claim', test.start('tbc.job', 'run', '{"queue": "q_tbc"}')::text, true);
  perform pg_catalog.set_config('tbc.id', test.jid('tbc.job', 'run')::text, true);
end $$;
select lives_ok($$ select jobs.enqueue('tbc.job', 'later', '{}', '{"queue": "q_tbc", "delay_s": 3600}') $$,
                'setup: a job delayed an hour');
select isnt(jobs.lease_acquire('tbc.lease', 'holder-a', 30), null, 'setup: holder-a holds a live lease');
create temp table before as select test.tables_digest() as d;
set local jobs.fake_now = '';

-- ---------------------------------------------------------------- a worker's clock
set local session authorization tbc_worker;
set local jobs.fake_now = '2100-01-01 00:00:00+00';
select throws_ok($$ select * from jobs.claim(array['q_tbc'], 'w-evil', 10, 30) $$, 'SJ019', null,
                 'worker at 2100: claim (which would recover the live lease as lapsed) is refused');
select throws_ok($$ select * from jobs.enqueue('tbc.job', 'w2100', '{}', '{"queue": "q_tbc"}') $$, 'SJ019', null,
                 'worker at 2100: enqueue is refused');
select throws_ok($$ select jobs.lease_acquire('tbc.lease', 'evil', 30) $$, 'SJ019', null,
                 'worker at 2100: lease_acquire (which would take the live lease) is refused');
select throws_ok($$ select jobs.heartbeat(current_setting('tbc.id')::bigint, current_setting('tbc.claim')::bigint, 30) $$,
                 'SJ019', null, 'worker at 2100: heartbeat (a lease to 2100) is refused, under the live token too');
set local jobs.fake_now = '1970-01-01 00:00:00+00';
select throws_ok($$ select * from jobs.claim(array['q_tbc'], 'w-evil', 10, 30) $$, 'SJ019', null,
                 'worker at 1970: claim is refused');
select throws_ok($$ select * from jobs.enqueue('tbc.job', 'w1970', '{}', '{"queue": "q_tbc"}') $$, 'SJ019', null,
                 'worker at 1970: enqueue is refused');
select throws_ok($$ select jobs.lease_acquire('tbc.lease', 'evil', 30) $$, 'SJ019', null,
                 'worker at 1970: lease_acquire is refused');
select throws_ok($$ select jobs.heartbeat(current_setting('tbc.id')::bigint, current_setting('tbc.claim')::bigint, 30) $$,
                 'SJ019', null, 'worker at 1970: heartbeat is refused');
reset jobs.fake_now;
select is((select count(*)::int from jobs.claim(array['q_tbc_empty'], 'w-ok', 10, 30)), 0,
          'the setting reset, the worker claims again (on the real clock)');

-- ---------------------------------------------------------------- a producer's clock
set local session authorization tbc_producer;
set local jobs.fake_now = '2100-01-01 00:00:00+00';
select throws_ok($$ select * from jobs.enqueue('tbc.job', 'p2100', '{}', '{"queue": "q_tbc"}') $$, 'SJ019', null,
                 'producer at 2100: enqueue is refused');
set local jobs.fake_now = '1970-01-01 00:00:00+00';
select throws_ok($$ select * from jobs.enqueue('tbc.job', 'p1970', '{}', '{"queue": "q_tbc"}') $$, 'SJ019', null,
                 'producer at 1970: enqueue is refused');
select throws_ok($$ select * from jobs.enqueue_many('[{"name": "tbc.job", "key": "pm", "queue": "q_tbc"}]') $$, 'SJ019', null,
                 'producer at 1970: enqueue_many is refused');
select throws_ok($$ select * from jobs.stage('tbc.job', 'ps', '{}', '{"queue": "q_tbc"}') $$, 'SJ019', null,
                 'producer at 1970: stage is refused');
select throws_ok($$ select jobs.emit_event('tbc.event', '{}') $$, 'SJ019', null,
                 'producer at 1970: emit_event is refused');
set local jobs.fake_now = '';

-- ---------------------------------------------------------------- nothing changed; the superuser's clock works
reset session authorization;
select is(test.tables_digest(), (select d from before),
          'no refused call changed any table of schema jobs (read as the superuser)');
set local session authorization tbc_producer;
select lives_ok($$ select jobs.enqueue('tbc.job', 'p-now', '{}', '{"queue": "q_tbc_p"}') $$,
                'an empty setting is no setting: the producer enqueues on the real clock');
reset session authorization;
set local jobs.fake_now = '2030-01-01 00:10:00+00';
select is(jobs.now(), '2030-01-01 00:10:00+00'::timestamptz, 'the superuser''s test clock still works');
select results_eq($$ select c.key from jobs.claim(array['q_tbc'], 'w-root', 10, 30) c order by c.key $$,
                  $$ values ('run') $$,
                  'at its 00:10 the live lease lapsed (recovered and claimed again), the delayed job still waits');

-- ---------------------------------------------------------------- a rate limit's admission
-- A claim admits rate-limited jobs at the admission's own time (sql/35_limits.sql,
-- jobs.admit), which reads the test clock through jobs.now(): a worker at 2100 must
-- not defer jobs of names it does not run to 2100 (where a real-clock claim defers
-- them by the window only).
set local jobs.fake_now = '';
select ok(jobs.limit_put('tbc_rl', '{"scope": "key", "target": "tbc.rl", "key": "site", "rate": {"n": 1, "per_s": 60}}'),
          'setup: one start of tbc.rl per minute per site');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "tbc.rl", "key": "r1", "queue": "q_tbc_rl", "payload": {"site": "a"}},
                                                     {"name": "tbc.rl", "key": "r2", "queue": "q_tbc_rl", "payload": {"site": "a"}}]') $$,
                'setup: two rate-limited jobs of another name, due now');
set local session authorization tbc_worker;
set local jobs.fake_now = '2100-01-01 00:00:00+00';
select throws_ok($$ select * from jobs.claim(array['q_tbc_rl'], 'w-evil', 10, 30) $$, 'SJ019', null,
                 'worker at 2100: the rate-limited claim is refused before any admission');
reset jobs.fake_now;
select is((select count(*)::int from jobs.claim(array['q_tbc_rl'], 'w-ok', 10, 30)), 1,
          'the setting reset, the worker''s claim starts one of the two');
reset session authorization;
select ok((select bool_and(run_at < now() + interval '1 hour') from jobs.job where name = 'tbc.rl')
          and (select count(*) = 1 from jobs.job where name = 'tbc.rl' and deferred_by is not null),
          'on the real clock one starts and the other is deferred by the window, not to 2100');

select * from finish();
rollback;
