-- jobs.nack / nack_many argument refusals: invalid_argument (SJ001) for an unknown mode,
-- arrays of different lengths, null ids or claims, a delay outside 0..1e9 s, an error
-- nested 100 levels deep. A refused call changes nothing, though its claim token is the
-- live one.
begin;
select plan(15);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.jid: sqltests/_helpers.sql); c: the live claim token
create temp table c as select test.start('nargs.job', 'k', '{"queue": "q_nargs"}') as claim;

select throws_ok(format('select jobs.nack(%s, %s, null, %L)', test.jid('nargs.job', 'k'), (select claim from c), 'later'), 'SJ001', null,
                 'an unknown mode is refused');
select throws_ok(format('select jobs.nack(%s, %s, null, %L)', test.jid('nargs.job', 'k'), (select claim from c), 'RETRY'), 'SJ001', null,
                 'modes are lower case');
select throws_ok(format('select jobs.nack(%s, %s, null, %L, -1)', test.jid('nargs.job', 'k'), (select claim from c), 'retry'), 'SJ001', null,
                 'a negative delay is refused');
select throws_ok(format('select jobs.nack(%s, %s, null, %L, %L)', test.jid('nargs.job', 'k'), (select claim from c), 'park', 'NaN'), 'SJ001', null,
                 'a NaN delay is refused');
select throws_ok(format('select jobs.nack(%s, %s, null, %L, %L)', test.jid('nargs.job', 'k'), (select claim from c), 'shed', 'Infinity'), 'SJ001', null,
                 'an infinite delay is refused');
select throws_ok(format('select jobs.nack(%s, %s, null, %L, %s)', test.jid('nargs.job', 'k'), (select claim from c), 'retry', 1e9 + 1),
                 'SJ001', null, 'a delay over 1e9 s is refused');
select throws_ok(format('select jobs.nack(%s, %s, %L, %L)', test.jid('nargs.job', 'k'), (select claim from c),
                        '{"kind": "error", "message": "m", "detail": ' || repeat('[', 100) || repeat(']', 100) || '}', 'fail'),
                 'SJ001', null, 'an error nested 100 levels deep is refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[%s, %s]::bigint[])',
                        test.jid('nargs.job', 'k'), (select claim from c), (select claim from c)),
                 'SJ001', null, 'ids and claims of different lengths are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[%s]::bigint[], array[null, null]::jsonb[])',
                        test.jid('nargs.job', 'k'), (select claim from c)),
                 'SJ001', null, 'errors of another length are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[%s]::bigint[], null, array[%L, %L])',
                        test.jid('nargs.job', 'k'), (select claim from c), 'fail', 'fail'),
                 'SJ001', null, 'modes of another length are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[%s]::bigint[], null, null, array[1, 2]::float8[])',
                        test.jid('nargs.job', 'k'), (select claim from c)),
                 'SJ001', null, 'delays of another length are refused');
select throws_ok(format('select * from jobs.nack_many(null, array[%s]::bigint[])', (select claim from c)),
                 'SJ001', null, 'null ids are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s, null], array[%s, %s]::bigint[])',
                        test.jid('nargs.job', 'k'), (select claim from c), (select claim from c)),
                 'SJ001', null, 'a null id is refused');
select throws_ok(format('select * from jobs.nack_many(array[%s, %s], array[%s, %s]::bigint[], null, array[%L, %L])',
                        test.jid('nargs.job', 'k'), test.jid('nargs.job', 'k'), (select claim from c), (select claim from c),
                        'fail', 'bogus'),
                 'SJ001', null, 'one bad mode refuses the whole batch');

-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select results_eq($$ select state::text, attempt, claim, last_error from jobs.job
                       where id = (select test.jid('nargs.job', 'k')) $$,
                  $$ values ('running', 1, (select claim from c), null::jsonb) $$,
                  'the refused calls changed nothing');

select * from finish();
rollback;
