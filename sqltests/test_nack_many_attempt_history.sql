-- jobs.nack_many's attempt history (jobs.job.attempts, sql/40_settle.sql): modes retry,
-- fail and interrupt append {attempt, claim, worker, started_at, ended_at, outcome,
-- error} (outcome retry, dead, failed or interrupted; error: what last_error stores);
-- park and shed append nothing, nor does a fenced-out nack; a claim and an ack never
-- write it (the hot path stays as it was).
begin;
select plan(24);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local timezone = 'UTC';  -- times inside jsonb are compared as text
create schema jobs_test;
create function jobs_test.job(p_key text) returns jobs.job language sql as $$
  select j from jobs.job j where j.name = 'hist.job' and j.key = p_key
$$;
-- claim p_key from its own queue as p_worker; answers the claim token
create function jobs_test.claim(p_key text, p_worker text) returns bigint language plpgsql as $$
declare v_claim bigint;
begin
  select c.claim into strict v_claim from jobs.claim(array['q_hist_' || p_key], p_worker, 1, 30) c;
  return v_claim;
end $$;
create function jobs_test.add(p_key text, p_options jsonb) returns void language sql as $$
  select from jobs.enqueue('hist.job', p_key, '{}',
                           p_options || pg_catalog.jsonb_build_object('queue', 'q_hist_' || p_key))
$$;

-- ---------------------------------------------------------------- retry, then dead
do $$ begin
  perform jobs_test.add('d', '{"max_attempts": 2, "retry_base_s": 10, "retry_jitter": "none"}');
  perform jobs_test.claim('d', 'w1');
end $$;
select is((jobs_test.job('d')).attempts, null, 'a claim writes no history');
set local jobs.fake_now = '2030-01-01 00:00:05+00';
select is(jobs.nack((jobs_test.job('d')).id, 1,
                    '{"kind": "error", "message": "boom 1", "traceback": "Traceback:\n  line 1\nValueError: boom 1"}'),
          'ready'::jobs.job_state, 'setup: attempt 1 fails and is retried');
select is((jobs_test.job('d')).attempts,
          '[{"attempt": 1, "claim": 1, "worker": "w1", "started_at": "2030-01-01T00:00:00+00:00",
             "ended_at": "2030-01-01T00:00:05+00:00", "outcome": "retry",
             "error": {"kind": "error", "message": "boom 1",
                       "traceback": "Traceback:\n  line 1\nValueError: boom 1",
                       "attempt": 1, "at": "2030-01-01T00:00:05+00:00"}}]'::jsonb,
          'a retried attempt is appended: number, claim, worker, start, end, outcome retry, its error');
select is((jobs_test.job('d')).attempts->0->'error', (jobs_test.job('d')).last_error,
          'the entry''s error is what last_error stores');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
select is(jobs_test.claim('d', 'w2'), 2::bigint, 'setup: attempt 2 is claimed');
select is((select pg_catalog.jsonb_array_length(j.attempts) from jobs.job j
            where j.name = 'hist.job' and j.key = 'd'), 1, 'claiming it again writes nothing');
set local jobs.fake_now = '2030-01-01 00:00:16+00';
select is(jobs.nack((jobs_test.job('d')).id, 2, '"boom 2"'), 'dead'::jobs.job_state,
          'setup: the last attempt fails');
select is(pg_catalog.jsonb_array_length((jobs_test.job('d')).attempts), 2, 'two entries, oldest first');
select is((jobs_test.job('d')).attempts->1,
          '{"attempt": 2, "claim": 2, "worker": "w2", "started_at": "2030-01-01T00:00:15+00:00",
            "ended_at": "2030-01-01T00:00:16+00:00", "outcome": "dead",
            "error": {"message": "boom 2", "attempt": 2, "at": "2030-01-01T00:00:16+00:00"}}'::jsonb,
          'retries exhausted: outcome dead; a string error is stored as its message');

-- ---------------------------------------------------------------- fail, no dead-letter
do $$ begin
  perform jobs_test.add('f', '{"max_attempts": 5}');
  perform jobs_test.claim('f', 'w1');
  perform jobs_test.add('nodl', '{"max_attempts": 1, "dead_letter": false}');
  perform jobs_test.claim('nodl', 'w1');
end $$;
select is(jobs.nack((jobs_test.job('f')).id, 1, '{"kind": "terminal", "message": "no"}', 'fail'),
          'failed'::jobs.job_state, 'setup: a terminal error on attempt 1 of 5');
select results_eq(
  $$ select e->>'outcome', (e->>'attempt')::int, e->'error'->>'kind'
       from jobs.job j, pg_catalog.jsonb_array_elements(j.attempts) e
      where j.name = 'hist.job' and j.key = 'f' $$,
  $$ values ('failed', 1, 'terminal') $$,
  'mode fail: one entry, outcome failed, on attempt 1');
select is(jobs.nack((jobs_test.job('nodl')).id, 1, '{"message": "x"}'), 'failed'::jobs.job_state,
          'setup: retries exhausted without dead-lettering');
select is((jobs_test.job('nodl')).attempts->0->>'outcome', 'failed',
          'exhausted with dead_letter off: outcome failed');

-- ---------------------------------------------------------------- interrupt, park, shed
do $$ begin
  perform jobs_test.add('i', '{}');
  perform jobs_test.claim('i', 'w-drain');
  perform jobs_test.add('p', '{}');
  perform jobs_test.claim('p', 'w1');
  perform jobs_test.add('s', '{}');
  perform jobs_test.claim('s', 'w1');
end $$;
select is(jobs.nack((jobs_test.job('i')).id, 1, null, 'interrupt'), 'interrupted'::jobs.job_state,
          'setup: a drain interrupts attempt 1');
select is((jobs_test.job('i')).attempts,
          '[{"attempt": 1, "claim": 1, "worker": "w-drain", "started_at": "2030-01-01T00:00:16+00:00",
             "ended_at": "2030-01-01T00:00:16+00:00", "outcome": "interrupted", "error": null}]'::jsonb,
          'interrupt: the run is recorded (its number before it was given back), error null when none given');
select is((jobs_test.job('i')).attempt, 0, 'the interrupted attempt is not counted');
select is(jobs.nack((jobs_test.job('p')).id, 1, null, 'park', 60), 'parked'::jobs.job_state, 'setup: park');
select is((jobs_test.job('p')).attempts, null, 'park writes no history (not a failure)');
select is(jobs.nack((jobs_test.job('s')).id, 1, '{"message": "rate limited"}', 'shed'),
          'ready'::jobs.job_state, 'setup: shed');
select is((jobs_test.job('s')).attempts, null, 'shed writes no history (not a failure)');

-- ---------------------------------------------------------------- batch, fence, ack
do $$ begin
  perform jobs_test.add('b1', '{}');
  perform jobs_test.add('b2', '{}');
  perform from jobs.claim('{q_hist_b1,q_hist_b2}', 'w-batch', 2, 30);
end $$;
select results_eq(
  $$ select n.ok from jobs.nack_many(array[(jobs_test.job('b1')).id, (jobs_test.job('b2')).id],
                                     array[1, 7]::bigint[], array['{"message": "one"}', '{"message": "two"}']::jsonb[],
                                     null, array[0, 0]::double precision[]) n $$,
  $$ values (true), (false) $$,
  'setup: a batch where the second claim is stale');
select results_eq(
  $$ select j.key, pg_catalog.jsonb_array_length(j.attempts), j.attempts->0->'error'->>'message'
       from jobs.job j where j.name = 'hist.job' and j.key in ('b1', 'b2') order by j.key $$,
  $$ values ('b1', 1, 'one'), ('b2', null::int, null::text) $$,
  'each job of a batch gets its own entry; a fenced-out nack writes none');
do $$ begin
  perform jobs_test.claim('b1', 'w-batch');  -- attempt 2 (retried with no delay: due now)
end $$;
select is((select a.ok from jobs.ack_many(array[(jobs_test.job('b1')).id], array[2::bigint]) a), true,
          'setup: attempt 2 succeeds');
select results_eq(
  $$ select j.state::text, pg_catalog.jsonb_array_length(j.attempts) from jobs.job j
      where j.name = 'hist.job' and j.key = 'b1' $$,
  $$ values ('succeeded', 1) $$,
  'an ack writes nothing: the failed attempt stays the one entry');

select * from finish();
rollback;
