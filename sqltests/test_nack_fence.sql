-- jobs.nack / nack_many fence: state = running AND the claim token. A stale nack raises
-- lease_lost (SJ004) and changes nothing; nack_many answers ok = false (state null) for
-- that job, in input order, and settles the others.
begin;
select plan(15);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.jid / test.claim_of: sqltests/_helpers.sql)

select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "nfence.job", "key": "a", "queue": "q_nfence"}, {"name": "nfence.job", "key": "b", "queue": "q_nfence"},
  {"name": "nfence.job", "key": "c", "queue": "q_nfence"}, {"name": "nfence.job", "key": "d", "queue": "q_nfence"}
]') $$, 'setup: four jobs');
select is((select count(*)::int from jobs.claim('{q_nfence}', 'w', 4, 30)), 4, 'setup: all claimed');
select lives_ok($$ select * from jobs.enqueue('nfence.job', 'ready', '{}', '{"queue": "q_nfence_r"}') $$,
                'setup: a ready job');

-- ---------------------------------------------------------------- nack
select throws_ok(format('select jobs.nack(%s, %s, %L)', test.jid('nfence.job', 'a'), test.claim_of('nfence.job', 'a') + 1,
                        '{"message": "late"}'), 'SJ004', null,
                 'nack under a wrong claim token (the live one + 1) raises lease_lost');
select throws_ok(format('select jobs.nack(%s, %s, null, %L)', test.jid('nfence.job', 'a'), test.claim_of('nfence.job', 'b'), 'fail'),
                 'SJ004', null, 'in any mode, and under another running job''s token too');
select throws_ok(format('select jobs.nack(%s, 0, null, %L)', test.jid('nfence.job', 'ready'), 'park'), 'SJ004', null,
                 'nack of a job that is not running raises lease_lost');
select throws_ok(format('select jobs.nack(-1, %s)', test.claim_of('nfence.job', 'a')), 'SJ004', null,
                 'nack of a missing job raises lease_lost');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select results_eq(
  $$ select state::text, attempt, last_error, lease_expires_at from jobs.job
      where id = (select test.jid('nfence.job', 'a'))
     union all
     select state::text, attempt, last_error, lease_expires_at from jobs.job
      where id = (select test.jid('nfence.job', 'ready')) $$,
  $$ values ('running', 1, null::jsonb, '2030-01-01 00:00:30+00'::timestamptz),
            ('ready', 0, null::jsonb, null::timestamptz) $$,
  'the refused nacks changed nothing');

-- ---------------------------------------------------------------- nack_many
create temp table r as
  select pg_catalog.row_number() over () as pos, m.*
    from jobs.nack_many(array[test.jid('nfence.job', 'c'), test.jid('nfence.job', 'a'), test.jid('nfence.job', 'ready'), test.jid('nfence.job', 'b'), -1],
                        array[test.claim_of('nfence.job', 'c'), test.claim_of('nfence.job', 'a') + 1, 0,
                              test.claim_of('nfence.job', 'b'), test.claim_of('nfence.job', 'd')],
                        array['{"m": "c"}', '{"m": "a"}', '{"m": "r"}', '{"m": "b"}', null]::jsonb[],
                        array['fail', 'fail', 'fail', 'park', 'fail']) m;
select results_eq($$ select id, ok, state from r order by pos $$,
                  $$ values (test.jid('nfence.job', 'c'), true, 'failed'::jobs.job_state),
                            (test.jid('nfence.job', 'a'), false, null::jobs.job_state),
                            (test.jid('nfence.job', 'ready'), false, null::jobs.job_state),
                            (test.jid('nfence.job', 'b'), true, 'parked'::jobs.job_state),
                            (-1::bigint, false, null::jobs.job_state) $$,
                  'nack_many answers (id, ok, state) per input in input order; ok = false where fenced out');
select results_eq($$ select key, state::text, last_error->>'m' from jobs.job where name = 'nfence.job' order by key $$,
                  $$ values ('a', 'running', null), ('b', 'parked', 'b'), ('c', 'failed', 'c'),
                            ('d', 'running', null), ('ready', 'ready', null) $$,
                  'each job got its own mode and error; the fenced-out ones are untouched');

select results_eq(
  format('select ok from jobs.nack_many(array[%s, %s], array[%s, %s]::bigint[])', test.jid('nfence.job', 'd'), test.jid('nfence.job', 'c'),
         test.claim_of('nfence.job', 'd'), test.claim_of('nfence.job', 'c')),
  $$ values (true), (false) $$,
  'with no errors, modes or delays: retry; a settled job answers false');
select is((select state from jobs.job where id = (select test.jid('nfence.job', 'd'))),
          'ready'::jobs.job_state, 'd was retried');

-- the stale worker after a cancel
set local jobs.fake_now = '2030-01-01 01:00:00+00';  -- (past d's retry backoff)
create temp table d2 as select c.key, c.claim from jobs.claim('{q_nfence}', 'w', 10, 30) c where c.key = 'd';
select lives_ok(format('select jobs.cancel(%s)', test.jid('nfence.job', 'd')), 'setup: the running job (d, claimed again) is cancelled');
select is((select key from d2), 'd', 'setup: d was running under a second claim');
select throws_ok(format('select jobs.nack(%s, %s)', test.jid('nfence.job', 'd'), (select claim from d2)), 'SJ004', null,
                 'nack of a cancelled job (under its last claim token) raises lease_lost');

select * from finish();
rollback;
