-- jobs.backfill_advance (one batch: cursor, counts; once per batch), jobs.backfill_status
-- and jobs.backfill_finish (the count check: completed or stalled), all fenced on the
-- running job's claim (SJ004) and on the row being that job's (sql/85_factories.sql).
begin;
select plan(18);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table c as select test.start('bf.adv', 'k1', '{"queue": "q_adv"}') as claim;
create temp table ids as select test.jid('bf.adv', 'k1') as id;
select lives_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, 25, false, %L)',
                       (select id from ids), (select claim from c), 'bf.adv', '', 'prod', 'sum', 'me'),
                'setup: a run begun, 25 rows expected');

select is(jobs.backfill_advance((select id from ids), (select claim from c), 'bf.adv', '', 'prod', 1, '[10]', 10),
          'running', 'batch 1 recorded; answers the status');
select results_eq($$ select cursor, batches, rows_done, job_batch from jobs.backfill where name = 'bf.adv' $$,
                  $$ values ('[10]'::jsonb, 1::bigint, 10::bigint, 1) $$, 'cursor, batches and rows moved');
select is(jobs.backfill_advance((select id from ids), (select claim from c), 'bf.adv', '', 'prod', 1, '[10]', 10),
          'running', 'batch 1 again (a run repeated after a crash)...');
select results_eq($$ select cursor, batches, rows_done from jobs.backfill where name = 'bf.adv' $$,
                  $$ values ('[10]'::jsonb, 1::bigint, 10::bigint) $$, '...is counted once');
select is(jobs.backfill_advance((select id from ids), (select claim from c), 'bf.adv', '', 'prod', 2, '[20]', 10),
          'running', 'batch 2');
select throws_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 3, %L, 5)',
                        (select id from ids), (select claim from c) + 1, 'bf.adv', '', 'prod', '[25]'),
                 'SJ004', null, 'under a wrong claim: lease_lost');
select throws_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 3, %L, 5)',
                        (select id from ids), (select claim from c), 'bf.adv', '', 'staging', '[25]'),
                 'SJ004', null, 'a row this job does not run (another environment): lease_lost');
select throws_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 0, %L, 5)',
                        (select id from ids), (select claim from c), 'bf.adv', '', 'prod', '[25]'),
                 'SJ001', null, 'batch 0 is refused');
select throws_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 3, %L, 5)',
                        (select id from ids), (select claim from c), 'bf.adv', '', 'prod',
                        repeat('[', 100) || '1' || repeat(']', 100)),
                 'SJ001', null, 'a cursor nested 100 levels deep is refused');
select is(jobs.backfill_status((select id from ids), (select claim from c), 'bf.adv', '', 'prod'), 'running',
          'backfill_status reads the row under the claim');
update jobs.backfill set status = 'paused' where name = 'bf.adv';
select is(jobs.backfill_advance((select id from ids), (select claim from c), 'bf.adv', '', 'prod', 3, '[23]', 3),
          'paused', 'a paused row still records the batch in hand, and says paused');

-- ---------------------------------------------------------------- finish: the count check
update jobs.backfill set status = 'running' where name = 'bf.adv';
select is(jobs.backfill_finish((select id from ids), (select claim from c), 'bf.adv', '', 'prod'), 'stalled',
          '23 rows of 25 expected: stalled');
select results_eq($$ select status, finished_at from jobs.backfill where name = 'bf.adv' $$,
                  $$ values ('stalled'::text, '2030-01-01 00:00:00+00'::timestamptz) $$, 'kept in the ledger, with its end');
select is(jobs.backfill_finish((select id from ids), (select claim from c), 'bf.adv', '', 'prod'), 'stalled',
          'finish again: the same answer (idempotent)');
update jobs.backfill set status = 'running', finished_at = null, rows_done = 25 where name = 'bf.adv';
select is(jobs.backfill_finish((select id from ids), (select claim from c), 'bf.adv', '', 'prod'), 'completed',
          'the count reached: completed');
update jobs.backfill set status = 'running', finished_at = null, rows_done = 30, expected = null where name = 'bf.adv';
select is(jobs.backfill_finish((select id from ids), (select claim from c), 'bf.adv', '', 'prod'), 'completed',
          'no count declared: completed');
do $$ begin perform jobs.ack(test.jid('bf.adv', 'k1'), (select claim from c)); end $$;
select throws_ok(format('select jobs.backfill_finish(%s, %s, %L, %L, %L)',
                        (select id from ids), (select claim from c), 'bf.adv', '', 'prod'),
                 'SJ004', null, 'after the job finished, its claim no longer holds');

select * from finish();
rollback;
