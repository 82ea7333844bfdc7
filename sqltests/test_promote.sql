-- jobs.promote(id): make a waiting job runnable now: ready (a parked job) with
-- run_at = least(run_at, now) (an interrupted job stays interrupted, which is claimable
-- like ready; a job already due keeps its place in line).
-- Errors: job_running (SJ009), job_finished (SJ010), job_not_found (SJ006); each
-- changes nothing.
begin;
select plan(17);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.job / test.jid / test.claim_of: sqltests/_helpers.sql): each started
-- job in its own queue q_promote_<key>

do $$ begin
  perform jobs.enqueue('promote.job', 'future', '{}', '{"queue": "q_promote", "delay_s": 3600}');
  perform jobs.enqueue('promote.job', 'due', '{}', '{"queue": "q_promote", "run_at": "2029-12-31T23:00:00Z"}');
  perform test.start('promote.job', 'pinf', '{"queue": "q_promote_pinf"}');
    perform jobs.nack(test.jid('promote.job', 'pinf'), test.claim_of('promote.job', 'pinf'), null, 'park');
  perform test.start('promote.job', 'p60', '{"queue": "q_promote_p60"}');
    perform jobs.nack(test.jid('promote.job', 'p60'), test.claim_of('promote.job', 'p60'), null, 'park', 60);
  perform test.start('promote.job', 'int', '{"queue": "q_promote_int"}');
    perform jobs.nack(test.jid('promote.job', 'int'), test.claim_of('promote.job', 'int'), null, 'interrupt');
  perform test.start('promote.job', 'run', '{"queue": "q_promote_run"}');
  perform test.start('promote.job', 'done', '{"queue": "q_promote_done"}');
    perform jobs.ack(test.jid('promote.job', 'done'), test.claim_of('promote.job', 'done'));
  perform test.start('promote.job', 'failed', '{"queue": "q_promote_failed"}');
    perform jobs.nack(test.jid('promote.job', 'failed'), test.claim_of('promote.job', 'failed'), null, 'fail');
  perform test.start('promote.job', 'cancel', '{"queue": "q_promote_cancel"}');
    perform jobs.cancel((test.job('promote.job', 'cancel')).id);
end $$;
set local jobs.fake_now = '2030-01-01 00:00:10+00';

select lives_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'future')).id), 'promote a job waiting for its run_at');
select results_eq($$ select state::text, run_at from jobs.job where name = 'promote.job' and key = 'future' $$,
                  $$ values ('ready', '2030-01-01 00:00:10+00'::timestamptz) $$, 'it is ready with run_at = now');
select lives_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'pinf')).id), 'promote a job parked with no wake-up');
select lives_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'p60')).id), 'promote a job parked for 60 s');
select results_eq($$ select key, state::text, run_at, attempt from jobs.job
                      where name = 'promote.job' and key in ('pinf', 'p60') order by key $$,
                  $$ values ('p60', 'ready', '2030-01-01 00:00:10+00'::timestamptz, 0),
                            ('pinf', 'ready', '2030-01-01 00:00:10+00'::timestamptz, 0) $$,
                  'parked jobs become ready now, attempts untouched');
select lives_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'due')).id), 'promote a job that is already due');
-- A job already due keeps its earlier run_at: promoting never moves it behind older
-- jobs of its priority.
select is((test.job('promote.job', 'due')).run_at, '2029-12-31 23:00:00+00'::timestamptz,
          'a job already due keeps its place in line');
select lives_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'int')).id), 'promote an interrupted job');
select results_eq($$ select state::text, run_at from jobs.job where name = 'promote.job' and key = 'int' $$,
                  $$ values ('interrupted', '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'it stays interrupted (claimable like ready), keeping its run_at: already due');

select results_eq($$ select key from jobs.claim('{q_promote,q_promote_pinf,q_promote_p60}', 'w', 10, 30) order by key $$,
                  $$ values ('due'), ('future'), ('p60'), ('pinf') $$,
                  'the promoted jobs are claimable now');

-- ---------------------------------------------------------------- refusals
create temp table before as
  select pg_catalog.string_agg(pg_catalog.concat_ws('/', key, state, run_at), ' ' order by key) as s
    from jobs.job where name = 'promote.job';
select throws_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'run')).id), 'SJ009', null,
                 'promote of a running job raises job_running');
select throws_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'done')).id), 'SJ010', null,
                 'promote of a succeeded job raises job_finished');
select throws_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'failed')).id), 'SJ010', null,
                 'promote of a failed job raises job_finished');
select throws_ok(format('select jobs.promote(%s)', (test.job('promote.job', 'cancel')).id), 'SJ010', null,
                 'promote of a cancelled job raises job_finished');
select throws_ok('select jobs.promote(-1)', 'SJ006', null, 'promote of a missing job raises job_not_found');
select is((select pg_catalog.string_agg(pg_catalog.concat_ws('/', key, state, run_at), ' ' order by key)
             from jobs.job where name = 'promote.job'),
          (select s from before), 'the refused promotes changed nothing');
select is((test.job('promote.job', 'run')).lease_expires_at, '2030-01-01 00:00:30+00'::timestamptz,
          'the running job keeps its lease');

select * from finish();
rollback;
