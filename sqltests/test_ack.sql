-- jobs.ack(id, claim, result): running -> succeeded with the result, finished now.
-- Fenced on state = running AND the claim token: otherwise lease_lost (SJ004), nothing changes.
begin;
select plan(19);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.job(p_key text) returns jobs.job language sql as $$
  select j from jobs.job j where j.name = 'ack.job' and j.key = p_key
$$;
-- enqueue p_key into its own queue and claim it; answers its claim token
create function jobs_test.start(p_key text) returns bigint language plpgsql as $$
declare v_claim bigint;
begin
  perform jobs.enqueue('ack.job', p_key, '{}', pg_catalog.jsonb_build_object('queue', 'q_ack_' || p_key));
  select c.claim into strict v_claim from jobs.claim(array['q_ack_' || p_key], 'w', 1, 30) c;
  return v_claim;
end $$;

do $$ begin perform jobs_test.start('a'); end $$;
set local jobs.fake_now = '2030-01-01 00:00:10+00';

-- ---------------------------------------------------------------- the fence
select throws_ok(format('select jobs.ack(%s, 2, %L)', (jobs_test.job('a')).id, '{"total": 1}'),
                 'SJ004', null, 'ack under a wrong claim token raises lease_lost');
select throws_ok(format('select jobs.ack(%s, 0)', (jobs_test.job('a')).id),
                 'SJ004', null, 'ack under claim token 0 raises lease_lost');
select results_eq(
  $$ select state, result, finished_at, lease_expires_at from jobs.job where name = 'ack.job' and key = 'a' $$,
  $$ values ('running'::jobs.job_state, null::jsonb, null::timestamptz, '2030-01-01 00:00:30+00'::timestamptz) $$,
  'the refused acks changed nothing');

-- ---------------------------------------------------------------- success
select lives_ok(format('select jobs.ack(%s, 1, %L)', (jobs_test.job('a')).id, '{"total": 3, "ok": [1, 2]}'),
                'ack under the current claim token');
select results_eq(
  $$ select state, result, finished_at, lease_expires_at, attempt, claim
       from jobs.job where name = 'ack.job' and key = 'a' $$,
  $$ values ('succeeded'::jobs.job_state, '{"total": 3, "ok": [1, 2]}'::jsonb,
             '2030-01-01 00:00:10+00'::timestamptz, null::timestamptz, 1, 1::bigint) $$,
  'succeeded: the result is stored, finished_at = now, the lease cleared');
select throws_ok(format('select jobs.ack(%s, 1, %L)', (jobs_test.job('a')).id, '"again"'),
                 'SJ004', null, 'a second ack (the job is no longer running) raises lease_lost');
select is((jobs_test.job('a')).result, '{"total": 3, "ok": [1, 2]}'::jsonb, 'and keeps the first result');

-- ---------------------------------------------------------------- an earlier attempt's error
do $$ begin perform jobs_test.start('e'); end $$;
select lives_ok(format('select jobs.nack(%s, 1, %L, %L, 0)', (jobs_test.job('e')).id,
                       '{"kind": "error", "message": "boom"}', 'retry'),
                'setup: the first attempt fails');
select lives_ok(format('select jobs.ack(c.id, c.claim) from jobs.claim(%L, %L, 1, 30) c',
                       '{q_ack_e}', 'w'), 'the second attempt succeeds');
select results_eq(
  $$ select state, last_error->>'message', last_error->'historical', (last_error->>'attempt')::int
       from jobs.job where name = 'ack.job' and key = 'e' $$,
  $$ values ('succeeded'::jobs.job_state, 'boom', 'true'::jsonb, 1) $$,
  'the first attempt''s error is kept, marked historical');

do $$ begin perform jobs_test.start('n'); end $$;
select lives_ok(format('select jobs.ack(%s, 1)', (jobs_test.job('n')).id), 'ack with no result');
select results_eq($$ select state, result from jobs.job where name = 'ack.job' and key = 'n' $$,
                  $$ values ('succeeded'::jobs.job_state, null::jsonb) $$, 'succeeded with a null result');

do $$ begin perform jobs_test.start('s'); end $$;
select lives_ok(format('select jobs.ack(%s, 1, %L)', (jobs_test.job('s')).id, '"plain string"'),
                'ack with a scalar result');
select is((jobs_test.job('s')).result, '"plain string"'::jsonb, 'any jsonb result is stored as given');

-- ---------------------------------------------------------------- not running
select lives_ok($$ select * from jobs.enqueue('ack.job', 'ready', '{}', '{"queue": "q_ack_ready"}') $$,
                'setup: a ready job');
select throws_ok(format('select jobs.ack(%s, 0)', (jobs_test.job('ready')).id), 'SJ004', null,
                 'ack of a ready job (claim 0) raises lease_lost');
select is((jobs_test.job('ready')).state, 'ready'::jobs.job_state, 'it stays ready');
select throws_ok('select jobs.ack(-1, 1)', 'SJ004', null, 'ack of a job that does not exist raises lease_lost');
select throws_ok(format('select jobs.ack(%s, 1)', (jobs_test.job('n')).id), 'SJ004', null,
                 'ack of a finished job raises lease_lost');

select * from finish();
rollback;
