-- jobs.claim takes ready and interrupted jobs only: never running, parked (before its
-- wake-up), succeeded, failed, dead or cancelled ones.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.jid / test.claim_of: sqltests/_helpers.sql); every job in queue q_states
do $$ begin perform test.start('states.job', 's', '{"queue": "q_states"}', 3600); end $$;
select lives_ok($$ select jobs.ack(test.jid('states.job', 's'), test.claim_of('states.job', 's')) $$, 'setup: succeeded');
do $$ begin perform test.start('states.job', 'f', '{"queue": "q_states"}', 3600); end $$;
select lives_ok($$ select jobs.nack(test.jid('states.job', 'f'), test.claim_of('states.job', 'f'), null, 'fail') $$, 'setup: failed');
do $$ begin perform test.start('states.job', 'd', '{"queue": "q_states", "max_attempts": 1}', 3600); end $$;
select lives_ok($$ select jobs.nack(test.jid('states.job', 'd'), test.claim_of('states.job', 'd')) $$,
                'setup: dead');
do $$ begin perform test.start('states.job', 'p', '{"queue": "q_states"}', 3600); end $$;
select lives_ok($$ select jobs.nack(test.jid('states.job', 'p'), test.claim_of('states.job', 'p'), null, 'park') $$,
                'setup: parked with no wake-up time');
select lives_ok($$ select test.start('states.job', 'r', '{"queue": "q_states"}', 3600) $$, 'setup: running');
do $$ begin perform test.start('states.job', 'i', '{"queue": "q_states"}', 3600); end $$;
select lives_ok($$ select jobs.nack(test.jid('states.job', 'i'), test.claim_of('states.job', 'i'), null, 'interrupt') $$,
                'setup: interrupted');
select lives_ok($$ select * from jobs.enqueue('states.job', 'c', '{}', '{"queue": "q_states"}') $$,
                'setup: a ready job...');
select lives_ok($$ select jobs.cancel(test.jid('states.job', 'c')) $$, '...cancelled');

select results_eq(
  $$ select key, state::text from jobs.job where name = 'states.job' order by key $$,
  $$ values ('c', 'cancelled'), ('d', 'dead'), ('f', 'failed'), ('i', 'interrupted'),
            ('p', 'parked'), ('r', 'running'), ('s', 'succeeded') $$,
  'setup: one job in every state');

select is((select pg_catalog.array_agg(c.key) from jobs.claim('{q_states}', 'w', 100, 3600) c),
          array['i'], 'of all of them, only the interrupted job is claimed');

-- a year on: the leases of the two running jobs (r, and i reclaimed above) have lapsed,
-- so both are recovered and claimed again
set local jobs.fake_now = '2031-01-01 00:00:00+00';
select is((select pg_catalog.array_agg(c.key) from jobs.claim('{q_states}', 'w', 100, 3600) c),
          array['r', 'i'], 'a year on, only the jobs with lapsed leases come back; finished jobs never do');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select state from jobs.job where id = (select test.jid('states.job', 'p'))),
          'parked'::jobs.job_state,
          'a job parked with no wake-up time stays parked');

select * from finish();
rollback;
