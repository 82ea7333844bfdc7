-- Trust boundary: what a worker login may do (sql/98_roles.sql; sql/00_schema.sql,
-- "Fencing tokens"). It may not configure the fleet (42501: no EXECUTE); it may declare
-- the job types it serves but only widen what they hide, never move them; it cannot
-- settle, heartbeat or step another worker's job, nor release another holder's lease,
-- by guessing a token (the counter values version 1 handed out, the live one + 1); and
-- a reader sees no token. Logged in as each role; checked as the superuser.
begin;
select plan(34);

create role tbw_worker_a login in role sqljobs_worker;
create role tbw_worker_b login in role sqljobs_worker;
create role tbw_reader login in role sqljobs_reader;
set local jobs.notify = off;

-- ---------------------------------------------------------------- no EXECUTE
set local session authorization tbw_worker_b;
select throws_ok($$ select jobs.job_type_put('tbw.card', '{"sensitive": []}') $$, '42501', null,
                 'worker: job_type_put is not granted');
select throws_ok($$ select jobs.limit_put('tbw_l', '{"scope": "queue", "target": "q", "concurrency": 1}') $$,
                 '42501', null, 'worker: limit_put is not granted');
select throws_ok($$ select jobs.limit_remove('tbw_l') $$, '42501', null, 'worker: limit_remove is not granted');
select throws_ok($$ select jobs.schedule_remove('tbw.s') $$, '42501', null, 'worker: schedule_remove is not granted');
select throws_ok($$ select jobs.schedule_put('tbw.s', '{"job": "tbw.job", "cron": "* * * * *"}') $$, '42501', null,
                 'worker: schedule_put is not granted');
select throws_ok($$ select jobs.leader_acquire('scheduler', 'tbw', 30) $$, '42501', null,
                 'worker: leader_acquire is not granted');
select throws_ok($$ select jobs.purge(1000, false, '{"succeeded": 0}') $$, '42501', null, 'worker: purge is not granted');
reset session authorization;

-- ---------------------------------------------------------------- job_type_declare only widens
select lives_ok($$ select jobs.job_type_put('tbw.card', '{"queue": "q_card", "sensitive": ["card.number", "cvv"]}') $$,
                'setup: an operator''s job type hides card.number and cvv, in queue q_card');
set local session authorization tbw_worker_b;
select is(jobs.job_type_declare('tbw.card', '{"sensitive": []}'), false,
          'worker: declaring the known type with no sensitive path answers false (not new)...');
select lives_ok($$ select jobs.job_type_declare('tbw.card', '{"queue": "q_elsewhere", "sensitive": ["pin"]}') $$,
                '...and so does declaring it in another queue, with another path');
select is(jobs.job_type_declare('tbw.new', '{"queue": "q_new", "sensitive": ["token"]}'), true,
          'worker: a new job type is registered as declared');
reset session authorization;
select results_eq($$ select name, queue, sensitive_paths, origin from jobs.job_type where name like 'tbw.%' order by name $$,
                  $$ values ('tbw.card', 'q_card', array['card.number', 'cvv', 'pin'], 'api'),
                            ('tbw.new', 'q_new', array['token'], 'declared') $$,
                  'the stored paths are the union (nothing dropped), the declared queue kept');

-- ---------------------------------------------------------------- guessed tokens
-- worker A runs a job and holds a lease; worker B guesses
set local session authorization tbw_worker_a;
do $$ begin
  perform pg_catalog.set_config('tbw.id', (select e.id from jobs.enqueue('tbw.job', 'k', '{}', '{"queue": "q_tbw"}') e)::text, true);
  perform pg_catalog.set_config('tbw.claim', (select c.claim from jobs.claim(array['q_tbw'], 'w-a', 1, 300) c)::text, true);
  perform pg_catalog.set_config('tbw.token', jobs.lease_acquire('tbw.lease', 'holder-a', 300)::text, true);
end $$;
reset session authorization;
create temp table guesses (g bigint, what text);
insert into guesses values
  (1, 'version 1''s first token (1)'), (2, 'the next counter value (2)'),
  (1::bigint << 32, 'the first high half, low half 0'), ((1::bigint << 32) | 1, 'the first high half, low half 1'),
  (current_setting('tbw.claim')::bigint + 1, 'the live token + 1'),
  (current_setting('tbw.claim')::bigint - 1, 'the live token - 1');
grant select on guesses to public;
create temp table before as select test.tables_digest() as d;

set local session authorization tbw_worker_b;
select throws_ok(format('select jobs.ack(%s, %s)', current_setting('tbw.id'), g.g), 'SJ004', null,
                 'worker B: ack of A''s job under ' || g.what || ' is lease_lost')
  from guesses g order by g.g;
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', current_setting('tbw.id'), g.g, 's', '1'), 'SJ004', null,
                 'worker B: step_put into A''s job under ' || g.what || ' is lease_lost')
  from guesses g order by g.g;
select is((select pg_catalog.bool_or(jobs.heartbeat(current_setting('tbw.id')::bigint, g.g, 3600)) from guesses g), false,
          'worker B: a heartbeat of A''s job under any guessed token answers false');
select is((select pg_catalog.bool_or(h.ok) from jobs.heartbeat_many(
             array(select current_setting('tbw.id')::bigint from guesses x order by x.g), array(select x.g from guesses x order by x.g), 3600) h), false,
          'worker B: heartbeat_many under the guessed tokens answers ok = false for each');
select is((select pg_catalog.bool_or(a.ok) from jobs.ack_many(
             array(select current_setting('tbw.id')::bigint from guesses x order by x.g), array(select x.g from guesses x order by x.g)) a), false,
          'worker B: ack_many under the guessed tokens settles nothing');
select is((select pg_catalog.bool_or(jobs.lease_release('tbw.lease', 'holder-a', g.g)) from guesses g), false,
          'worker B: lease_release of A''s lease (its holder''s name) under a guessed token answers false');
select is((select pg_catalog.bool_or(jobs.lease_holds('tbw.lease', g.g)) from guesses g
            where g.g <> current_setting('tbw.token')::bigint), false,
          'and no guessed token holds the lease');
reset session authorization;
select is(test.tables_digest(), (select d from before), 'no guessed call changed any table');
-- (the setting read first, in a scalar subquery: distributed on Citus, a query over the
-- jobs runs on a shard, where the setting does not exist)
select results_eq($$ select j.state::text, j.claim, j.worker from jobs.job j
                      where j.id = (select current_setting('tbw.id')::bigint) $$,
                  $$ values ('running', current_setting('tbw.claim')::bigint, 'w-a') $$,
                  'A''s job still runs under A''s claim');

-- ---------------------------------------------------------------- a reader sees no token
set local session authorization tbw_reader;
select is((select pg_catalog.count(*)::int from jobs.leases() l
            where pg_catalog.to_jsonb(l) ? 'token'
               or pg_catalog.strpos(pg_catalog.to_jsonb(l)::text, current_setting('tbw.token')) > 0), 0,
          'reader: jobs.leases() shows the lease but no token');
select is((select count(*)::int from jobs.leases() where name = 'tbw.lease' and holder = 'holder-a' and live), 1,
          'reader: (the lease is listed, live)');
-- Pins that list_jobs (over jobs.job_view, which keeps version 1's claim column) shows
-- a running job's claim ordinal (claim >> 32), never the live token a fenced call needs.
select is((select pg_catalog.count(*)::int from jobs.list_jobs('{"queue": "q_tbw"}', null, 10) v
            where pg_catalog.strpos(pg_catalog.to_jsonb(v)::text, current_setting('tbw.claim')) > 0), 0,
          'reader: jobs.list_jobs does not show the live claim token of a running job');
reset session authorization;

select * from finish();
rollback;
