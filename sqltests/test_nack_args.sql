-- jobs.nack / nack_many argument refusals: invalid_argument (SJ001) for an unknown mode,
-- arrays of different lengths, null ids or claims, and a negative or non-finite delay.
-- A refused call changes nothing.
begin;
select plan(13);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.jid() returns bigint language sql as $$
  select j.id from jobs.job j where j.name = 'nargs.job' and j.key = 'k'
$$;
do $$ begin
  perform jobs.enqueue('nargs.job', 'k', '{}', '{"queue": "q_nargs"}');
  perform from jobs.claim('{q_nargs}', 'w', 1, 30);
end $$;

select throws_ok(format('select jobs.nack(%s, 1, null, %L)', jobs_test.jid(), 'later'), 'SJ001', null,
                 'an unknown mode is refused');
select throws_ok(format('select jobs.nack(%s, 1, null, %L)', jobs_test.jid(), 'RETRY'), 'SJ001', null,
                 'modes are lower case');
select throws_ok(format('select jobs.nack(%s, 1, null, %L, -1)', jobs_test.jid(), 'retry'), 'SJ001', null,
                 'a negative delay is refused');
select throws_ok(format('select jobs.nack(%s, 1, null, %L, %L)', jobs_test.jid(), 'park', 'NaN'), 'SJ001', null,
                 'a NaN delay is refused');
select throws_ok(format('select jobs.nack(%s, 1, null, %L, %L)', jobs_test.jid(), 'shed', 'Infinity'), 'SJ001', null,
                 'an infinite delay is refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[1, 2]::bigint[])', jobs_test.jid()),
                 'SJ001', null, 'ids and claims of different lengths are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[1]::bigint[], array[null, null]::jsonb[])', jobs_test.jid()),
                 'SJ001', null, 'errors of another length are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[1]::bigint[], null, array[%L, %L])',
                        jobs_test.jid(), 'fail', 'fail'),
                 'SJ001', null, 'modes of another length are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s], array[1]::bigint[], null, null, array[1, 2]::float8[])',
                        jobs_test.jid()),
                 'SJ001', null, 'delays of another length are refused');
select throws_ok('select * from jobs.nack_many(null, array[1]::bigint[])', 'SJ001', null, 'null ids are refused');
select throws_ok(format('select * from jobs.nack_many(array[%s, null], array[1, 1]::bigint[])', jobs_test.jid()),
                 'SJ001', null, 'a null id is refused');
select throws_ok(format('select * from jobs.nack_many(array[%s, %s], array[1, 1]::bigint[], null, array[%L, %L])',
                        jobs_test.jid(), jobs_test.jid(), 'fail', 'bogus'),
                 'SJ001', null, 'one bad mode refuses the whole batch');

select results_eq($$ select state::text, attempt, claim, last_error from jobs.job where id = jobs_test.jid() $$,
                  $$ values ('running', 1, 1::bigint, null::jsonb) $$,
                  'the refused calls changed nothing');

select * from finish();
rollback;
