-- jobs.claim takes ready and interrupted jobs only: never running, parked (before its
-- wake-up), succeeded, failed, dead or cancelled ones.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.jid(p_key text) returns bigint language sql as $$
  select j.id from jobs.job j where j.name = 'states.job' and j.key = p_key
$$;
create function jobs_test.tok(p_key text) returns bigint language sql as $$
  select j.claim from jobs.job j where j.name = 'states.job' and j.key = p_key
$$;
-- enqueue p_key into q_states (then the only ready job there) and claim it: its token
create function jobs_test.start(p_key text, p_options jsonb default '{}') returns bigint
language plpgsql as $$
declare v_claim bigint;
begin
  perform jobs.enqueue('states.job', p_key, '{}', p_options || '{"queue": "q_states"}');
  select c.claim into strict v_claim from jobs.claim('{q_states}', 'w', 1, 3600) c;
  return v_claim;
end $$;

do $$ begin perform jobs_test.start('s'); end $$;
select lives_ok($$ select jobs.ack(jobs_test.jid('s'), jobs_test.tok('s')) $$, 'setup: succeeded');
do $$ begin perform jobs_test.start('f'); end $$;
select lives_ok($$ select jobs.nack(jobs_test.jid('f'), jobs_test.tok('f'), null, 'fail') $$, 'setup: failed');
do $$ begin perform jobs_test.start('d', '{"max_attempts": 1}'); end $$;
select lives_ok($$ select jobs.nack(jobs_test.jid('d'), jobs_test.tok('d')) $$,
                'setup: dead');
do $$ begin perform jobs_test.start('p'); end $$;
select lives_ok($$ select jobs.nack(jobs_test.jid('p'), jobs_test.tok('p'), null, 'park') $$,
                'setup: parked with no wake-up time');
select lives_ok($$ select jobs_test.start('r') $$, 'setup: running');
do $$ begin perform jobs_test.start('i'); end $$;
select lives_ok($$ select jobs.nack(jobs_test.jid('i'), jobs_test.tok('i'), null, 'interrupt') $$,
                'setup: interrupted');
select lives_ok($$ select * from jobs.enqueue('states.job', 'c', '{}', '{"queue": "q_states"}') $$,
                'setup: a ready job...');
select lives_ok($$ select jobs.cancel(jobs_test.jid('c')) $$, '...cancelled');

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
select is((select state from jobs.job where id = jobs_test.jid('p')), 'parked'::jobs.job_state,
          'a job parked with no wake-up time stays parked');

select * from finish();
rollback;
