-- jobs.ack_many(ids, claims, results): one (id, ok) per input, in input order; each job
-- is fenced on its own; ok = false changes nothing for that job.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.jid / test.claim_of: sqltests/_helpers.sql)

select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "ackm.job", "key": "a", "queue": "q_ackm"}, {"name": "ackm.job", "key": "b", "queue": "q_ackm"},
  {"name": "ackm.job", "key": "c", "queue": "q_ackm"}, {"name": "ackm.job", "key": "d", "queue": "q_ackm"},
  {"name": "ackm.job", "key": "e", "queue": "q_ackm"}, {"name": "ackm.job", "key": "f", "queue": "q_ackm"}
]') $$, 'setup: six jobs');
select is((select count(*)::int from jobs.claim('{q_ackm}', 'w', 6, 30)), 6, 'setup: all six claimed');

-- c (good), a (wrong claim), missing, b (good): input order is not id order
create temp table r as
  select pg_catalog.row_number() over () as pos, m.*
    from jobs.ack_many(array[test.jid('ackm.job', 'c'), test.jid('ackm.job', 'a'), -1, test.jid('ackm.job', 'b')],
                       array[test.claim_of('ackm.job', 'c'), test.claim_of('ackm.job', 'a') + 1,
                             test.claim_of('ackm.job', 'a'), test.claim_of('ackm.job', 'b')],
                       array['{"r": "c"}', '{"r": "a"}', '{"r": "x"}', '{"r": "b"}']::jsonb[]) m;
select results_eq($$ select id, ok from r order by pos $$,
                  $$ values (test.jid('ackm.job', 'c'), true), (test.jid('ackm.job', 'a'), false), (-1::bigint, false),
                            (test.jid('ackm.job', 'b'), true) $$,
                  'one answer per input in input order: ok where the fence held');
select results_eq($$ select key, state::text, result from jobs.job where name = 'ackm.job' and key in ('a', 'b', 'c') order by key $$,
                  $$ values ('a', 'running', null::jsonb), ('b', 'succeeded', '{"r": "b"}'::jsonb),
                            ('c', 'succeeded', '{"r": "c"}'::jsonb) $$,
                  'each settled job got its own result; the fenced-out one is untouched');

select results_eq(
  $$ select ok from jobs.ack_many(array[test.jid('ackm.job', 'c'), test.jid('ackm.job', 'd')],
                                    array[test.claim_of('ackm.job', 'c'), test.claim_of('ackm.job', 'd')]) $$,
  $$ values (false), (true) $$,
  'an already-settled job answers false beside a good one');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select result from jobs.job where id = (select test.jid('ackm.job', 'd'))),
          null::jsonb,
          'with no results array, results are null');
select is((select count(*)::int from jobs.ack_many('{}'::bigint[], '{}'::bigint[])), 0,
          'an empty batch answers nothing');

-- ---------------------------------------------------------------- argument refusals
select throws_ok(format('select * from jobs.ack_many(array[%s, %s], array[1]::bigint[])',
                        test.jid('ackm.job', 'e'), test.jid('ackm.job', 'f')),
                 'SJ001', null, 'ids and claims of different lengths are refused');
select throws_ok(format('select * from jobs.ack_many(array[%s, %s], array[1, 1]::bigint[], array[%L]::jsonb[])',
                        test.jid('ackm.job', 'e'), test.jid('ackm.job', 'f'), '{}'),
                 'SJ001', null, 'results of another length are refused');
select throws_ok('select * from jobs.ack_many(null, array[1]::bigint[])', 'SJ001', null, 'null ids are refused');
select throws_ok(format('select * from jobs.ack_many(array[%s], null)', test.jid('ackm.job', 'e')),
                 'SJ001', null, 'null claims are refused');
select throws_ok(format('select * from jobs.ack_many(array[%s, null], array[1, 1]::bigint[])', test.jid('ackm.job', 'e')),
                 'SJ001', null, 'a null id is refused');
select throws_ok(format('select * from jobs.ack_many(array[%s], array[null]::bigint[])', test.jid('ackm.job', 'e')),
                 'SJ001', null, 'a null claim is refused');
select results_eq($$ select state::text from jobs.job
                       where id in ((select test.jid('ackm.job', 'e')),
                                    (select test.jid('ackm.job', 'f'))) $$,
                  $$ values ('running'), ('running') $$, 'the refused batches changed nothing');

select * from finish();
rollback;
