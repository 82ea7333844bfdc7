-- jobs.promote(id): make a waiting job runnable now: ready (a parked job) with
-- run_at = least(run_at, now) (an interrupted job stays interrupted, which is claimable
-- like ready; a job already due keeps its place in line).
-- Errors: job_running (SJ009), job_finished (SJ010), job_not_found (SJ006); each
-- changes nothing.
begin;
select plan(17);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.job(p_key text) returns jobs.job language sql as $$
  select j from jobs.job j where j.name = 'promote.job' and j.key = p_key
$$;
create function jobs_test.start(p_key text) returns void language plpgsql as $$
begin
  perform jobs.enqueue('promote.job', p_key, '{}', pg_catalog.jsonb_build_object('queue', 'q_promote_' || p_key));
  perform from jobs.claim(array['q_promote_' || p_key], 'w', 1, 30);
end $$;

do $$ begin
  perform jobs.enqueue('promote.job', 'future', '{}', '{"queue": "q_promote", "delay_s": 3600}');
  perform jobs.enqueue('promote.job', 'due', '{}', '{"queue": "q_promote", "run_at": "2029-12-31T23:00:00Z"}');
  perform jobs_test.start('pinf');  perform jobs.nack((jobs_test.job('pinf')).id, 1, null, 'park');
  perform jobs_test.start('p60');   perform jobs.nack((jobs_test.job('p60')).id, 1, null, 'park', 60);
  perform jobs_test.start('int');   perform jobs.nack((jobs_test.job('int')).id, 1, null, 'interrupt');
  perform jobs_test.start('run');
  perform jobs_test.start('done');  perform jobs.ack((jobs_test.job('done')).id, 1);
  perform jobs_test.start('failed'); perform jobs.nack((jobs_test.job('failed')).id, 1, null, 'fail');
  perform jobs_test.start('cancel'); perform jobs.cancel((jobs_test.job('cancel')).id);
end $$;
set local jobs.fake_now = '2030-01-01 00:00:10+00';

select lives_ok(format('select jobs.promote(%s)', (jobs_test.job('future')).id), 'promote a job waiting for its run_at');
select results_eq($$ select state::text, run_at from jobs.job where name = 'promote.job' and key = 'future' $$,
                  $$ values ('ready', '2030-01-01 00:00:10+00'::timestamptz) $$, 'it is ready with run_at = now');
select lives_ok(format('select jobs.promote(%s)', (jobs_test.job('pinf')).id), 'promote a job parked with no wake-up');
select lives_ok(format('select jobs.promote(%s)', (jobs_test.job('p60')).id), 'promote a job parked for 60 s');
select results_eq($$ select key, state::text, run_at, attempt from jobs.job
                      where name = 'promote.job' and key in ('pinf', 'p60') order by key $$,
                  $$ values ('p60', 'ready', '2030-01-01 00:00:10+00'::timestamptz, 0),
                            ('pinf', 'ready', '2030-01-01 00:00:10+00'::timestamptz, 0) $$,
                  'parked jobs become ready now, attempts untouched');
select lives_ok(format('select jobs.promote(%s)', (jobs_test.job('due')).id), 'promote a job that is already due');
-- A job already due keeps its earlier run_at: promoting never moves it behind older
-- jobs of its priority.
select is((jobs_test.job('due')).run_at, '2029-12-31 23:00:00+00'::timestamptz,
          'a job already due keeps its place in line');
select lives_ok(format('select jobs.promote(%s)', (jobs_test.job('int')).id), 'promote an interrupted job');
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
select throws_ok(format('select jobs.promote(%s)', (jobs_test.job('run')).id), 'SJ009', null,
                 'promote of a running job raises job_running');
select throws_ok(format('select jobs.promote(%s)', (jobs_test.job('done')).id), 'SJ010', null,
                 'promote of a succeeded job raises job_finished');
select throws_ok(format('select jobs.promote(%s)', (jobs_test.job('failed')).id), 'SJ010', null,
                 'promote of a failed job raises job_finished');
select throws_ok(format('select jobs.promote(%s)', (jobs_test.job('cancel')).id), 'SJ010', null,
                 'promote of a cancelled job raises job_finished');
select throws_ok('select jobs.promote(-1)', 'SJ006', null, 'promote of a missing job raises job_not_found');
select is((select pg_catalog.string_agg(pg_catalog.concat_ws('/', key, state, run_at), ' ' order by key)
             from jobs.job where name = 'promote.job'),
          (select s from before), 'the refused promotes changed nothing');
select is((jobs_test.job('run')).lease_expires_at, '2030-01-01 00:00:30+00'::timestamptz,
          'the running job keeps its lease');

select * from finish();
rollback;
