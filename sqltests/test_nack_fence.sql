-- jobs.nack / nack_many fence: state = running AND the claim token. A stale nack raises
-- lease_lost (SJ004) and changes nothing; nack_many answers ok = false (state null) for
-- that job, in input order, and settles the others.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.jid(p_key text) returns bigint language sql as $$
  select j.id from jobs.job j where j.name = 'nfence.job' and j.key = p_key
$$;

select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "nfence.job", "key": "a", "queue": "q_nfence"}, {"name": "nfence.job", "key": "b", "queue": "q_nfence"},
  {"name": "nfence.job", "key": "c", "queue": "q_nfence"}, {"name": "nfence.job", "key": "d", "queue": "q_nfence"}
]') $$, 'setup: four jobs');
select is((select count(*)::int from jobs.claim('{q_nfence}', 'w', 4, 30)), 4, 'setup: all claimed (claim 1)');
select lives_ok($$ select * from jobs.enqueue('nfence.job', 'ready', '{}', '{"queue": "q_nfence_r"}') $$,
                'setup: a ready job');

-- ---------------------------------------------------------------- nack
select throws_ok(format('select jobs.nack(%s, 9, %L)', jobs_test.jid('a'), '{"message": "late"}'), 'SJ004', null,
                 'nack under a wrong claim token raises lease_lost');
select throws_ok(format('select jobs.nack(%s, 9, null, %L)', jobs_test.jid('a'), 'fail'), 'SJ004', null,
                 'in any mode');
select throws_ok(format('select jobs.nack(%s, 0, null, %L)', jobs_test.jid('ready'), 'park'), 'SJ004', null,
                 'nack of a job that is not running raises lease_lost');
select throws_ok('select jobs.nack(-1, 1)', 'SJ004', null, 'nack of a missing job raises lease_lost');
select results_eq(
  $$ select state::text, attempt, last_error, lease_expires_at from jobs.job where id = jobs_test.jid('a')
     union all
     select state::text, attempt, last_error, lease_expires_at from jobs.job where id = jobs_test.jid('ready') $$,
  $$ values ('running', 1, null::jsonb, '2030-01-01 00:00:30+00'::timestamptz),
            ('ready', 0, null::jsonb, null::timestamptz) $$,
  'the refused nacks changed nothing');

-- ---------------------------------------------------------------- nack_many
create temp table r as
  select pg_catalog.row_number() over () as pos, m.*
    from jobs.nack_many(array[jobs_test.jid('c'), jobs_test.jid('a'), jobs_test.jid('ready'), jobs_test.jid('b'), -1],
                        array[1, 5, 0, 1, 1]::bigint[],
                        array['{"m": "c"}', '{"m": "a"}', '{"m": "r"}', '{"m": "b"}', null]::jsonb[],
                        array['fail', 'fail', 'fail', 'park', 'fail']) m;
select results_eq($$ select id, ok, state from r order by pos $$,
                  $$ values (jobs_test.jid('c'), true, 'failed'::jobs.job_state),
                            (jobs_test.jid('a'), false, null::jobs.job_state),
                            (jobs_test.jid('ready'), false, null::jobs.job_state),
                            (jobs_test.jid('b'), true, 'parked'::jobs.job_state),
                            (-1::bigint, false, null::jobs.job_state) $$,
                  'nack_many answers (id, ok, state) per input in input order; ok = false where fenced out');
select results_eq($$ select key, state::text, last_error->>'m' from jobs.job where name = 'nfence.job' order by key $$,
                  $$ values ('a', 'running', null), ('b', 'parked', 'b'), ('c', 'failed', 'c'),
                            ('d', 'running', null), ('ready', 'ready', null) $$,
                  'each job got its own mode and error; the fenced-out ones are untouched');

select results_eq(
  format('select ok from jobs.nack_many(array[%s, %s], array[1, 1]::bigint[])', jobs_test.jid('d'), jobs_test.jid('c')),
  $$ values (true), (false) $$,
  'with no errors, modes or delays: retry; a settled job answers false');
select is((select state from jobs.job where id = jobs_test.jid('d')), 'ready'::jobs.job_state, 'd was retried');

-- the stale worker after a cancel
do $$ begin perform from jobs.claim('{q_nfence}', 'w', 1, 30); end $$;
select lives_ok(format('select jobs.cancel(%s)', jobs_test.jid('d')), 'setup: the running job is cancelled');
select throws_ok(format('select jobs.nack(%s, 2)', jobs_test.jid('d')), 'SJ004', null,
                 'nack of a cancelled job raises lease_lost');

select * from finish();
rollback;
