-- jobs.purge: finished jobs go by age per final state (built-in defaults: succeeded 1 day,
-- cancelled 7 days, failed and dead 30 days), per-queue overrides (stored and per call)
-- win, live jobs never go; each call deletes at most p_max, oldest first, and answers
-- what is still eligible; a dry run counts and deletes nothing.
begin;
select plan(19);

set local jobs.notify = off;
create schema jobs_test;
-- (test.finish: sqltests/_helpers.sql)
create function jobs_test.keys() returns text[] language sql as $$
  select array(select j.key from jobs.job j where j.name = 'purge.job' order by j.key)
$$;

select is((select row(p.queue, p.succeeded_s, p.failed_s, p.dead_s, p.cancelled_s, p.awaited_s,
                      p.events_s)::text from jobs.retention_policy() p),
          row('*', 86400, 2592000, 2592000, 604800, 3600, 604800)::text,
          'the built-in defaults: succeeded 1 d, failed and dead 30 d, cancelled 7 d, awaited 1 h, events 7 d');

-- ---------------------------------------------------------------- ages per state
-- T0 = 2030-01-01; the purge runs at T0 + 31 days (2030-02-01).
set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform test.finish('purge.job', 'a_s_old', '{"queue": "q"}', 'succeeded');
  perform test.finish('purge.job', 'a_c_old', '{"queue": "q"}', 'cancelled');
  perform test.finish('purge.job', 'a_f_old', '{"queue": "q"}', 'failed');
  perform test.finish('purge.job', 'a_d_old', '{"queue": "q"}', 'dead');
  perform test.finish('purge.job', 'a_ready', '{"queue": "q_ready"}', 'ready');
  perform test.finish('purge.job', 'a_running', '{"queue": "q_run"}', 'running');
  perform test.finish('purge.job', 'a_parked', '{"queue": "q_park"}', 'parked');
  perform test.finish('purge.job', 'k_s_old', '{"queue": "keep"}', 'succeeded');    -- queue 'keep': forever
  perform test.finish('purge.job', 'f_c_old', '{"queue": "fast"}', 'cancelled');
end $$;
set local jobs.fake_now = '2030-01-24 00:00:00+00';          -- 8 days before the purge
do $$ begin
  perform test.finish('purge.job', 'b_c_8d', '{"queue": "q"}', 'cancelled');
  perform test.finish('purge.job', 'b_f_8d', '{"queue": "q"}', 'failed');
end $$;
set local jobs.fake_now = '2030-01-30 00:00:00+00';          -- 2 days before the purge
do $$ begin
  perform test.finish('purge.job', 'c_s_2d', '{"queue": "q"}', 'succeeded');
  perform test.finish('purge.job', 'c_c_2d', '{"queue": "q"}', 'cancelled');
  perform test.finish('purge.job', 'c_d_2d', '{"queue": "q"}', 'dead');
  perform test.finish('purge.job', 'f_c_2d', '{"queue": "fast"}', 'cancelled');
end $$;
set local jobs.fake_now = '2030-01-31 23:00:00+00';          -- 1 hour before
do $$ begin
  perform test.finish('purge.job', 'd_s_1h', '{"queue": "q"}', 'succeeded');
end $$;
select lives_ok($$ select * from jobs.retention_put('keep', '{"succeeded": "forever"}') $$,
                'a stored override: queue keep keeps succeeded jobs forever');

set local jobs.fake_now = '2030-02-01 00:00:00+00';
-- dry run: counts only
select results_eq($$ select what, deleted, remaining from jobs.purge(1000, true) order by what $$,
                  $$ values ('event', 0::bigint, 0::bigint), ('job', 0, 7), ('outbox', 0, null) $$,
                  'a dry run answers what is eligible: 7 jobs');
select is(pg_catalog.cardinality(jobs_test.keys()), 16, 'the dry run deleted nothing');
select is((select remaining from jobs.purge(1000, true, '{"queues": {"fast": {"cancelled": 60}}}')
            where what = 'job'), 8::bigint,
          'a call''s queue override counts one more (fast''s 2-day-old cancelled job)');

-- the bound: at most p_max per call, oldest first, one state at a time
select results_eq($$ select deleted, remaining from jobs.purge(3) where what = 'job' $$,
                  $$ values (3::bigint, 4::bigint) $$, 'max 3: three deleted, four still eligible');
select ok(not (jobs_test.keys() && array['a_s_old', 'c_s_2d', 'a_c_old'])
          and jobs_test.keys() @> array['b_c_8d', 'f_c_old', 'a_f_old', 'a_d_old'],
          'the three: both succeeded jobs, then the oldest cancelled one');
select results_eq($$ select deleted, remaining from jobs.purge(1000) where what = 'job' $$,
                  $$ values (4::bigint, 0::bigint) $$, 'the next call takes the rest');
select results_eq($$ select deleted, remaining from jobs.purge(1000) where what = 'job' $$,
                  $$ values (0::bigint, 0::bigint) $$, 'then nothing is left');
select is(jobs_test.keys(),
          array['a_parked', 'a_ready', 'a_running', 'b_f_8d', 'c_c_2d', 'c_d_2d', 'd_s_1h',
                'f_c_2d', 'k_s_old'],
          'left: live jobs, and finished ones younger than their state''s age or kept by their queue');
select ok(jobs_test.keys() @> array['a_ready', 'a_running', 'a_parked'],
          'live jobs (ready, running, parked) are never purged, however old');
select ok(jobs_test.keys() @> array['d_s_1h'], 'a succeeded job younger than a day stays');
select ok(jobs_test.keys() @> array['c_c_2d'] and not (jobs_test.keys() @> array['b_c_8d']),
          'cancelled: 2 days old stays, 8 days old went');
select ok(jobs_test.keys() @> array['b_f_8d', 'c_d_2d'],
          'failed and dead jobs younger than 30 days stay');
select ok(jobs_test.keys() @> array['k_s_old'], 'queue keep''s stored "forever" kept its 31-day-old job');

-- the call's own policy: "queues" for one queue, the top level for the others
select results_eq($$ select deleted from jobs.purge(1000, false, '{"queues": {"fast": {"cancelled": 60}}}')
                     where what = 'job' $$,
                  $$ values (1::bigint) $$, 'a call''s queue override: fast''s 2-day-old cancelled job goes');
select ok(jobs_test.keys() @> array['c_c_2d'], '...and no other queue''s');
select results_eq($$ select deleted from jobs.purge(1000, false, '{"succeeded": 0}') where what = 'job' $$,
                  $$ values (1::bigint) $$, 'a call''s top-level age: the 1-hour-old succeeded job goes');
select ok(jobs_test.keys() @> array['k_s_old'],
          'a queue''s own stored age is more specific than a call''s top level: keep''s job stays');

select * from finish();
rollback;
