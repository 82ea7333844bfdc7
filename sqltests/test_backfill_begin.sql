-- jobs.backfill_begin(id, claim, name, scope, environment, environments, requires,
-- checksum, expected, rerun, started_by): the gate of a backfill run
-- (sql/85_factories.sql). Fenced on the claim (SJ004); environment (SJ040), requires
-- (SJ041), a completed row of another checksum (SJ042), another live run (SJ043);
-- verdict 'run' (from the ledger's cursor) or 'done'.
begin;
select plan(22);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table c as select test.start('bf.a', 'k1', '{"queue": "q_bf"}') as claim;
create temp table ids as select test.jid('bf.a', 'k1') as a1;

-- ---------------------------------------------------------------- the fence
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, null, false, %L)',
                        (select a1 from ids), (select claim from c) + 1, 'bf.a', '', 'prod', 'sum1', 'me'),
                 'SJ004', null, 'a wrong claim token is refused (lease_lost)');
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, null, false, %L)',
                        (select a1 from ids), (select claim from c), 'bf.other', '', 'prod', 'sum1', 'me'),
                 'SJ004', null, 'the claim of a job of another name is refused');
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, null, false, %L)',
                        (select a1 from ids), (select claim from c), 'bf.a', 'other-scope', 'prod', 'sum1', 'me'),
                 'SJ004', null, 'a scope that is not the payload''s is refused');
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, -1, false, %L)',
                        (select a1 from ids), (select claim from c), 'bf.a', '', 'prod', 'sum1', 'me'),
                 'SJ001', null, 'a negative count is refused');
select is((select count(*) from jobs.backfill)::int, 0, 'no ledger row was written by a refusal');

-- ---------------------------------------------------------------- environment and requires
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, %L, null, %L, null, false, %L)',
                        (select a1 from ids), (select claim from c), 'bf.a', '', 'dev', '{staging,prod}', 'sum1', 'me'),
                 'SJ040', null, 'an environment not listed is refused (backfill_environment_refused)');
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, %L, %L, null, false, %L)',
                        (select a1 from ids), (select claim from c), 'bf.a', '', 'prod', '{bf.first}', 'sum1', 'me'),
                 'SJ041', null, 'a required backfill that never ran is refused (backfill_requires_unmet)');
insert into jobs.backfill (environment, name, scope, checksum, status, started_by, started_at, updated_at)
values ('staging', 'bf.first', '', 'x', 'completed', 'me', jobs.now(), jobs.now()),
       ('prod', 'bf.first', '', 'x', 'running', 'me', jobs.now(), jobs.now());
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, %L, %L, null, false, %L)',
                        (select a1 from ids), (select claim from c), 'bf.a', '', 'prod', '{bf.first}', 'sum1', 'me'),
                 'SJ041', null, 'completed in another environment, running in this one: still unmet');
update jobs.backfill set status = 'completed' where environment = 'prod' and name = 'bf.first';

-- ---------------------------------------------------------------- a first run
select results_eq(format('select verdict, cursor, batches, rows_done from jobs.backfill_begin(%s, %s, %L, %L, %L, %L, %L, %L, 10, false, %L)',
                         (select a1 from ids), (select claim from c), 'bf.a', '', 'prod', '{prod}', '{bf.first}', 'sum1', 'ci@host'),
                  $$ values ('run'::text, null::jsonb, 0::bigint, 0::bigint) $$,
                  'requirement met, environment listed: run from the start');
select results_eq($$ select status, job_id, checksum, expected, started_by, started_at from jobs.backfill where name = 'bf.a' $$,
                  format('values (%L, %s::bigint, %L, 10::bigint, %L, %L::timestamptz)', 'running', (select a1 from ids), 'sum1',
                         'ci@host', '2030-01-01 00:00:00+00'),
                  'the ledger row: running, this job, the checksum, the count, who and when');
update jobs.backfill set cursor = '[42]', batches = 3, rows_done = 30, job_batch = 3 where name = 'bf.a';
select results_eq(format('select verdict, cursor, batches from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 10, false, %L)',
                         (select a1 from ids), (select claim from c), 'bf.a', '', 'prod', 'sum1', 'ci@host'),
                  $$ values ('run'::text, '[42]'::jsonb, 3::bigint) $$,
                  'the same job again (a replay): run, from where the ledger is');

-- ---------------------------------------------------------------- another live run
create temp table c2 as select test.start('bf.a', 'k2', '{"queue": "q_bf2"}') as claim;
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 10, false, %L)',
                        test.jid('bf.a', 'k2'), (select claim from c2), 'bf.a', '', 'prod', 'sum1', 'me'),
                 'SJ043', null, 'a second job while the first is live is refused (backfill_busy)');

-- ---------------------------------------------------------------- the first run dies: a new one goes on
do $$ begin perform jobs.cancel(test.jid('bf.a', 'k1')); end $$;
select results_eq(format('select verdict, cursor, batches, rows_done from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 10, false, %L)',
                         test.jid('bf.a', 'k2'), (select claim from c2), 'bf.a', '', 'prod', 'sum2', 'me'),
                  $$ values ('run'::text, '[42]'::jsonb, 3::bigint, 30::bigint) $$,
                  'after the first job ended unfinished, a new one goes on from the cursor and counts');
select results_eq($$ select job_id, job_batch, checksum from jobs.backfill where name = 'bf.a' $$,
                  format('values (%s::bigint, 0, %L)', test.jid('bf.a', 'k2'), 'sum2'),
                  'the row is the new job''s, its batch fence reset, the new checksum recorded');

-- ---------------------------------------------------------------- completed: done, changed, rerun
update jobs.backfill set status = 'completed', finished_at = jobs.now() where name = 'bf.a';
create temp table c3 as select test.start('bf.a', 'k3', '{"queue": "q_bf3"}') as claim;
select results_eq(format('select verdict from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 10, false, %L)',
                         test.jid('bf.a', 'k3'), (select claim from c3), 'bf.a', '', 'prod', 'sum2', 'me'),
                  $$ values ('done'::text) $$, 'completed under the same checksum: done');
select is((select job_id from jobs.backfill where name = 'bf.a'), test.jid('bf.a', 'k2'),
          'and the row is left as it was');
select throws_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 10, false, %L)',
                        test.jid('bf.a', 'k3'), (select claim from c3), 'bf.a', '', 'prod', 'sum3', 'me'),
                 'SJ042', null, 'completed under another checksum: refused (backfill_checksum_changed)');
select is((select status from jobs.backfill where name = 'bf.a'), 'completed', 'the row stays completed');
select results_eq(format('select verdict, cursor, batches, rows_done from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 10, true, %L)',
                         test.jid('bf.a', 'k3'), (select claim from c3), 'bf.a', '', 'prod', 'sum3', 'me'),
                  $$ values ('run'::text, null::jsonb, 0::bigint, 0::bigint) $$,
                  'rerun: from the start, counts reset');
select results_eq($$ select status, checksum, finished_at from jobs.backfill where name = 'bf.a' $$,
                  $$ values ('running'::text, 'sum3'::text, null::timestamptz) $$,
                  'running again under the new checksum');

-- ---------------------------------------------------------------- scopes are rows of their own
create temp table c4 as select test.start('bf.a', 'k4', '{"queue": "q_bf4"}') as claim;
update jobs.job set payload = '{"scope": "tenant-9"}' where id = test.jid('bf.a', 'k4');
select results_eq(format('select verdict from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, null, false, %L)',
                         test.jid('bf.a', 'k4'), (select claim from c4), 'bf.a', 'tenant-9', 'prod', 'sum3', 'me'),
                  $$ values ('run'::text) $$, 'another scope of the same backfill runs beside it');
select is((select count(*) from jobs.backfill where name = 'bf.a')::int, 2, 'as a row of its own');

select * from finish();
rollback;
