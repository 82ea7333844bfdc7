-- The operator's verbs on the backfill ledger (sql/85_factories.sql): backfill_pause
-- (running -> paused), backfill_resume (paused -> running, and the event that wakes the
-- parked run), backfill_cancel (-> cancelled, and its live job cancelled), each refusing
-- an unknown row (SJ044) and a wrong state (SJ045); and jobs.backfills(), the one
-- projection, showing the job's state when it ended a row unfinished.
begin;
select plan(17);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table c as select test.start('bf.op', 'k1', '{"queue": "q_op"}') as claim;
select lives_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, null, false, %L)',
                       test.jid('bf.op', 'k1'), (select claim from c), 'bf.op', '', 'prod', 'sum', 'me'),
                'setup: a run begun in prod');

select throws_ok($$ select jobs.backfill_pause('bf.none', '', 'prod') $$, 'SJ044', null,
                 'pause of a backfill that never ran there: backfill_not_found');
select throws_ok($$ select jobs.backfill_pause('bf.op', '', 'staging') $$, 'SJ044', null,
                 'environments are apart: not found in staging');
select throws_ok($$ select jobs.backfill_resume('bf.op', '', 'prod') $$, 'SJ045', null,
                 'resume of a running backfill: backfill_state');
select lives_ok($$ select jobs.backfill_pause('bf.op', '', 'prod') $$, 'pause');
select is((select status from jobs.backfill where name = 'bf.op'), 'paused', 'the row is paused');
select throws_ok($$ select jobs.backfill_pause('bf.op', '', 'prod') $$, 'SJ045', null, 'pause twice: backfill_state');
select is(jobs.backfill_advance(test.jid('bf.op', 'k1'), (select claim from c), 'bf.op', '', 'prod', 1, '[1]', 1),
          'paused', 'the run learns it at its next batch');

select lives_ok($$ select jobs.backfill_resume('bf.op', '', 'prod') $$, 'resume');
select results_eq($$ select name, payload from jobs.event where name = 'sqljobs.backfill' $$,
                  $$ values ('sqljobs.backfill'::text,
                             '{"action": "resume", "environment": "prod", "name": "bf.op", "scope": ""}'::jsonb) $$,
                  'resume emitted the event the parked run waits for');
select is((select status from jobs.backfill where name = 'bf.op'), 'running', 'the row runs again');

select results_eq($$ select status, job_state, rows_done from jobs.backfills('prod') $$,
                  $$ values ('running'::text, 'running'::text, 1::bigint) $$, 'backfills(): the row and its job''s state');
select lives_ok($$ select jobs.backfill_cancel('bf.op', '', 'prod') $$, 'cancel');
select results_eq($$ select b.status, j.state::text from jobs.backfill b join jobs.job j on j.id = b.job_id where b.name = 'bf.op' $$,
                  $$ values ('cancelled'::text, 'cancelled'::text) $$,
                  'the row is cancelled, and so is its job (its run''s next fenced call fails)');
select throws_ok($$ select jobs.backfill_cancel('bf.op', '', 'prod') $$, 'SJ045', null, 'cancel twice: backfill_state');

-- a running row whose job died shows the job's state
create temp table c2 as select test.start('bf.dead', 'k1', '{"queue": "q_dead"}') as claim;
do $$ begin
  perform * from jobs.backfill_begin(test.jid('bf.dead', 'k1'), (select claim from c2), 'bf.dead', '', 'prod', null, null, 's', null, false, 'me');
  perform jobs.nack(test.jid('bf.dead', 'k1'), (select claim from c2), '{"message": "boom"}', 'fail', null);
end $$;
select results_eq($$ select status, job_state from jobs.backfills('prod') where name = 'bf.dead' $$,
                  $$ values ('failed'::text, 'failed'::text) $$, 'a running row whose job failed reads failed');
select is((select count(*) from jobs.backfills(null))::int, 2, 'backfills(null): every environment');

select * from finish();
rollback;
