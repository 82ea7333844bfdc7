-- jobs.claim: each claim moves the claim token (never reset), counts the attempt, sets
-- the lease to now + lease_s, records the worker and the start; answers the job's fields.
-- The token (sql/00_schema.sql, "Fencing tokens") is ((old >> 32) + 1) << 32 | 32
-- random bits: its high half counts the claims, its low half is unguessable, and no
-- error message, detail or hint prints the live one.
begin;
select plan(26);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.job / test.error_text: sqltests/_helpers.sql)

create temp table e as
  select * from jobs.enqueue('token.job', 'k', '{"x": 1}', '{"queue": "q_token", "tenant": "t1",
    "priority": 4, "max_attempts": 3, "timeout_s": 9, "traceparent": "00-abc-def-01"}');

create temp table c1 as select * from jobs.claim('{q_token}', 'worker-1', 1, 12.5);
select results_eq(
  $$ select id, name, queue, tenant, key, payload, priority, attempt, max_attempts, claim >> 32,
            lease_expires_at, timeout_s, progress, traceparent, created_at from c1 $$,
  $$ values ((select id from e), 'token.job', 'q_token', 't1', 'k', '{"x": 1}'::jsonb, 4::smallint,
             1, 3, 1::bigint, '2030-01-01 00:00:12.5+00'::timestamptz, 9::float8, null::jsonb,
             '00-abc-def-01', '2030-01-01 00:00:00+00'::timestamptz) $$,
  'claim answers the job with attempt 1, the first claim token (high half 1) and lease = now + lease_s');
select is((test.job('token.job', 'k')).claim, (select claim from c1),
          'the row holds the token the claim answered');
select is((test.job('token.job', 'k')).state, 'running'::jobs.job_state, 'the job is running');
select is((test.job('token.job', 'k')).worker, 'worker-1', 'the worker is recorded');
select is((test.job('token.job', 'k')).started_at, '2030-01-01 00:00:00+00'::timestamptz, 'started_at is jobs.now()');
select is((test.job('token.job', 'k')).lease_expires_at, '2030-01-01 00:00:12.5+00'::timestamptz,
          'the row holds the same lease expiry');

-- ---------------------------------------------------------------- no error prints the live token
select ok(test.error_text(format('select jobs.ack(%s, %s)', (select id from e), (select claim from c1) + 1))
            like 'SJ004 | %',
          'an ack under a wrong token raises lease_lost (SJ004)');
select ok(strpos(test.error_text(format('select jobs.ack(%s, %s)', (select id from e), (select claim from c1) + 1)),
                 (select claim from c1)::text) = 0
          and strpos(test.error_text(format('select jobs.nack(%s, 0)', (select id from e))),
                     (select claim from c1)::text) = 0
          and strpos(test.error_text(format('select jobs.step_put(%s, 1, %L, %L)', (select id from e), 's', '1')),
                     (select claim from c1)::text) = 0,
          'no lease_lost error (of ack, nack, step_put) prints the live token in its message, detail or hint');
select ok(strpos(test.error_text(format('select jobs.ack(%s, %s)', (select id from e), (select claim from c1) + 1)),
                 ((select claim from c1) + 1)::text) = 0,
          'nor the token it was given');

-- lapse and reclaim
set local jobs.fake_now = '2030-01-01 00:00:12.5+00';
select is((select count(*)::int from jobs.claim('{q_token}', 'worker-2', 1, 30)), 0,
          'a lease is held up to its expiry instant');
set local jobs.fake_now = '2030-01-01 00:01:00+00';
create temp table c2 as select * from jobs.claim('{q_token}', 'worker-2', 1, 30);
select results_eq($$ select id, claim >> 32, attempt from c2 $$,
                  $$ select id, 2::bigint, 2 from e $$,
                  'after the lease lapsed, the next claim takes it with the second token (high half 2), attempt 2');
select ok((select claim from c2) > (select claim from c1), 'the second token is greater than the first');
select is((test.job('token.job', 'k')).worker, 'worker-2', 'the new worker is recorded');
select is((test.job('token.job', 'k')).started_at, '2030-01-01 00:01:00+00'::timestamptz, 'started_at moves');
select is((test.job('token.job', 'k')).lease_expires_at, '2030-01-01 00:01:30+00'::timestamptz, 'the lease is renewed');
select is(jobs.heartbeat((select id from e), (select claim from c1), 30), false, 'the first claim token no longer holds');

-- interrupt (uncounted) and reclaim: the token still moves
select is(jobs.nack((select id from e), (select claim from c2), null, 'interrupt'), 'interrupted'::jobs.job_state,
          'setup: the run is interrupted');
create temp table c3 as select * from jobs.claim('{q_token}', 'worker-3', 1, 30);
select results_eq($$ select claim >> 32, claim > (select c2.claim from c2), attempt from c3 $$,
                  $$ values (3::bigint, true, 2) $$,
                  'an interrupted job is claimed again with a greater token (the third) and the same attempt');

-- a requeue resets the attempt, never the claim token
select is(jobs.nack((select id from e), (select claim from c3), '{"message": "x"}', 'fail'), 'failed'::jobs.job_state,
          'setup: the job fails');
select lives_ok($$ select jobs.requeue(array[(select id from e)]) $$, 'setup: the job is requeued');
create temp table c4 as select * from jobs.claim('{q_token}', 'worker-4', 1, 30);
select results_eq($$ select claim >> 32, claim > (select c3.claim from c3), attempt from c4 $$,
                  $$ values (4::bigint, true, 1) $$,
                  'after a requeue: a greater token (the fourth), attempt 1');
select is((test.job('token.job', 'k')).claim, (select claim from c4), 'the row holds the latest token');

-- ---------------------------------------------------------------- the low half is random
select is((select count(distinct claim & 4294967295)::int
             from (select claim from c1 union all select claim from c2
                   union all select claim from c3 union all select claim from c4) t),
          4, 'the four claims of one job differ in their low 32 bits');
-- twenty jobs, each claimed alone, under the same high half: their low halves are
-- unrelated to the job ids and to one another
create temp table many as select k from pg_catalog.generate_series(1, 20) k;
select lives_ok($$ select jobs.enqueue('token.many', k::text, '{}', pg_catalog.jsonb_build_object('queue', 'q_tm_' || k))
                     from many $$, 'setup: twenty jobs in queues of their own');
create temp table tm as
  select k, test.claim_one('q_tm_' || k) as claim from many;
select results_eq($$ select count(*)::int, count(distinct claim & 4294967295)::int, min(claim >> 32), max(claim >> 32)
                      from tm $$,
                  $$ values (20, 20, 1::bigint, 1::bigint) $$,
                  'twenty first claims: the same high half, twenty different low halves');
select ok((select count(*) from tm where (claim & 4294967295) >= 65536) >= 10
          and (select count(*) from tm t join jobs.job j on j.key = t.k::text and j.name = 'token.many'
                where (t.claim & 4294967295) = j.id) = 0,
          'the low halves spread over 32 bits (not a small counter) and are not the job ids');

select * from finish();
rollback;
