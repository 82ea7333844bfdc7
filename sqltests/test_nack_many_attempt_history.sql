-- jobs.nack_many's attempt history (jobs.job.attempts, sql/40_settle.sql): modes retry,
-- fail and interrupt append {attempt, claim (its ordinal, never the token), worker, started_at, ended_at, outcome,
-- error} (outcome retry, dead, failed or interrupted; error: what last_error stores);
-- park and shed append nothing, nor does a fenced-out nack; a claim and an ack never
-- write it (the hot path stays as it was).
begin;
select plan(25);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local timezone = 'UTC';  -- times inside jsonb are compared as text
-- (test.start / test.claim_one / test.job: sqltests/_helpers.sql); tok: each claim's token
create temp table tok (key text, n int, claim bigint, primary key (key, n));

-- ---------------------------------------------------------------- retry, then dead
insert into tok select 'd', 1, test.start('hist.job', 'd', '{"queue": "q_hist_d", "max_attempts": 2, "retry_base_s": 10,
                                                           "retry_jitter": "none"}', 30, 'w1');
select is((test.job('hist.job', 'd')).attempts, null, 'a claim writes no history');
set local jobs.fake_now = '2030-01-01 00:00:05+00';
select is(jobs.nack((test.job('hist.job', 'd')).id, (select claim from tok where key = 'd' and n = 1),
                    '{"kind": "error", "message": "boom 1", "traceback": "Traceback:\n  line 1\nValueError: boom 1"}'),
          'ready'::jobs.job_state, 'setup: attempt 1 fails and is retried');
select is((test.job('hist.job', 'd')).attempts,
          jsonb_build_array('{"attempt": 1, "worker": "w1", "started_at": "2030-01-01T00:00:00+00:00",
             "ended_at": "2030-01-01T00:00:05+00:00", "outcome": "retry",
             "error": {"kind": "error", "message": "boom 1",
                       "traceback": "Traceback:\n  line 1\nValueError: boom 1",
                       "attempt": 1, "at": "2030-01-01T00:00:05+00:00"}}'::jsonb
            || jsonb_build_object('claim', (select claim >> 32 from tok where key = 'd' and n = 1))),
          'a retried attempt is appended: number, claim, worker, start, end, outcome retry, its error');
select is((test.job('hist.job', 'd')).attempts->0->'error', (test.job('hist.job', 'd')).last_error,
          'the entry''s error is what last_error stores');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
insert into tok select 'd', 2, test.claim_one('q_hist_d', 'w2');
select is((select claim >> 32 from tok where key = 'd' and n = 2), 2::bigint, 'setup: attempt 2 is claimed (the second token)');
select is((select pg_catalog.jsonb_array_length(j.attempts) from jobs.job j
            where j.name = 'hist.job' and j.key = 'd'), 1, 'claiming it again writes nothing');
set local jobs.fake_now = '2030-01-01 00:00:16+00';
select is(jobs.nack((test.job('hist.job', 'd')).id, (select claim from tok where key = 'd' and n = 2), '"boom 2"'), 'dead'::jobs.job_state,
          'setup: the last attempt fails');
select is(pg_catalog.jsonb_array_length((test.job('hist.job', 'd')).attempts), 2, 'two entries, oldest first');
select is((test.job('hist.job', 'd')).attempts->1,
          '{"attempt": 2, "worker": "w2", "started_at": "2030-01-01T00:00:15+00:00",
            "ended_at": "2030-01-01T00:00:16+00:00", "outcome": "dead",
            "error": {"message": "boom 2", "attempt": 2, "at": "2030-01-01T00:00:16+00:00"}}'::jsonb
          || jsonb_build_object('claim', (select claim >> 32 from tok where key = 'd' and n = 2)),
          'retries exhausted: outcome dead; a string error is stored as its message');

-- ---------------------------------------------------------------- fail, no dead-letter
insert into tok select 'f', 1, test.start('hist.job', 'f', '{"queue": "q_hist_f", "max_attempts": 5}', 30, 'w1');
insert into tok select 'nodl', 1, test.start('hist.job', 'nodl', '{"queue": "q_hist_nodl", "max_attempts": 1,
                                                                 "dead_letter": false}', 30, 'w1');
select is(jobs.nack((test.job('hist.job', 'f')).id, (select claim from tok where key = 'f' and n = 1), '{"kind": "terminal", "message": "no"}', 'fail'),
          'failed'::jobs.job_state, 'setup: a terminal error on attempt 1 of 5');
select results_eq(
  $$ select e->>'outcome', (e->>'attempt')::int, e->'error'->>'kind'
       from jobs.job j, pg_catalog.jsonb_array_elements(j.attempts) e
      where j.name = 'hist.job' and j.key = 'f' $$,
  $$ values ('failed', 1, 'terminal') $$,
  'mode fail: one entry, outcome failed, on attempt 1');
select is(jobs.nack((test.job('hist.job', 'nodl')).id, (select claim from tok where key = 'nodl' and n = 1), '{"message": "x"}'), 'failed'::jobs.job_state,
          'setup: retries exhausted without dead-lettering');
select is((test.job('hist.job', 'nodl')).attempts->0->>'outcome', 'failed',
          'exhausted with dead_letter off: outcome failed');

-- ---------------------------------------------------------------- interrupt, park, shed
insert into tok select 'i', 1, test.start('hist.job', 'i', '{"queue": "q_hist_i"}', 30, 'w-drain');
insert into tok select 'p', 1, test.start('hist.job', 'p', '{"queue": "q_hist_p"}', 30, 'w1');
insert into tok select 's', 1, test.start('hist.job', 's', '{"queue": "q_hist_s"}', 30, 'w1');
select is(jobs.nack((test.job('hist.job', 'i')).id, (select claim from tok where key = 'i' and n = 1), null, 'interrupt'), 'interrupted'::jobs.job_state,
          'setup: a drain interrupts attempt 1');
select is((test.job('hist.job', 'i')).attempts,
          jsonb_build_array('{"attempt": 1, "worker": "w-drain", "started_at": "2030-01-01T00:00:16+00:00",
             "ended_at": "2030-01-01T00:00:16+00:00", "outcome": "interrupted", "error": null}'::jsonb
            || jsonb_build_object('claim', (select claim >> 32 from tok where key = 'i' and n = 1))),
          'interrupt: the run is recorded (its number before it was given back), error null when none given');
select is((test.job('hist.job', 'i')).attempt, 0, 'the interrupted attempt is not counted');
select is(jobs.nack((test.job('hist.job', 'p')).id, (select claim from tok where key = 'p' and n = 1), null, 'park', 60), 'parked'::jobs.job_state, 'setup: park');
select is((test.job('hist.job', 'p')).attempts, null, 'park writes no history (not a failure)');
select is(jobs.nack((test.job('hist.job', 's')).id, (select claim from tok where key = 's' and n = 1), '{"message": "rate limited"}', 'shed'),
          'ready'::jobs.job_state, 'setup: shed');
select is((test.job('hist.job', 's')).attempts, null, 'shed writes no history (not a failure)');

-- ---------------------------------------------------------------- batch, fence, ack
select lives_ok($$ select jobs.enqueue('hist.job', k, '{}', jsonb_build_object('queue', 'q_hist_' || k))
                     from unnest(array['b1', 'b2']) k $$, 'setup: two jobs');
insert into tok select c.key, 1, c.claim from jobs.claim('{q_hist_b1,q_hist_b2}', 'w-batch', 2, 30) c;
select results_eq(
  $$ select n.ok from jobs.nack_many(array[(test.job('hist.job', 'b1')).id, (test.job('hist.job', 'b2')).id],
                                     array[(select claim from tok where key = 'b1' and n = 1),
                                           (select claim from tok where key = 'b2' and n = 1) + 1],
                                     array['{"message": "one"}', '{"message": "two"}']::jsonb[],
                                     null, array[0, 0]::double precision[]) n $$,
  $$ values (true), (false) $$,
  'setup: a batch where the second claim is stale');
select results_eq(
  $$ select j.key, pg_catalog.jsonb_array_length(j.attempts), j.attempts->0->'error'->>'message'
       from jobs.job j where j.name = 'hist.job' and j.key in ('b1', 'b2') order by j.key $$,
  $$ values ('b1', 1, 'one'), ('b2', null::int, null::text) $$,
  'each job of a batch gets its own entry; a fenced-out nack writes none');
-- attempt 2 (retried with no delay: due now)
insert into tok select 'b1', 2, test.claim_one('q_hist_b1', 'w-batch');
select is((select a.ok from jobs.ack_many(array[(test.job('hist.job', 'b1')).id],
                                          array[(select claim from tok where key = 'b1' and n = 2)]) a), true,
          'setup: attempt 2 succeeds');
select results_eq(
  $$ select j.state::text, pg_catalog.jsonb_array_length(j.attempts) from jobs.job j
      where j.name = 'hist.job' and j.key = 'b1' $$,
  $$ values ('succeeded', 1) $$,
  'an ack writes nothing: the failed attempt stays the one entry');

select * from finish();
rollback;
