-- jobs.requeue(ids): failed, dead and cancelled jobs -> ready, attempt 0, run now, in
-- one statement. Refuses the whole call, changing nothing, on a missing id
-- (job_not_found SJ006), a succeeded job (job_not_requeueable SJ007) or a live one
-- (job_live SJ008); a null id is a missing one (SJ006).
begin;
select plan(22);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
-- (test.start / test.jid / test.claim_of: sqltests/_helpers.sql): each started job in its
-- own queue q_rq_<key>
-- the state of every job, to show a refusal changed nothing
create function jobs_test.snapshot() returns text language sql as $$
  select pg_catalog.string_agg(pg_catalog.concat_ws('/', j.key, j.state, j.attempt, j.run_at, j.finished_at), ' '
                               order by j.key)
    from jobs.job j where j.name = 'rq.job'
$$;

do $$ begin
  perform test.start('rq.job', 'f', '{"queue": "q_rq_f"}');
    perform jobs.nack(test.jid('rq.job', 'f'), test.claim_of('rq.job', 'f'), '{"m": "f"}', 'fail');
  perform test.start('rq.job', 'd', '{"queue": "q_rq_d", "max_attempts": 1}');
    perform jobs.nack(test.jid('rq.job', 'd'), test.claim_of('rq.job', 'd'), '{"m": "d"}');
  perform test.start('rq.job', 'c', '{"queue": "q_rq_c"}');
    perform jobs.cancel(test.jid('rq.job', 'c'));
  perform test.start('rq.job', 's', '{"queue": "q_rq_s"}');
    perform jobs.ack(test.jid('rq.job', 's'), test.claim_of('rq.job', 's'), '"ok"');
  perform test.start('rq.job', 'run', '{"queue": "q_rq_run"}');
  perform test.start('rq.job', 'p', '{"queue": "q_rq_p"}');
    perform jobs.nack(test.jid('rq.job', 'p'), test.claim_of('rq.job', 'p'), null, 'park');
  perform test.start('rq.job', 'i', '{"queue": "q_rq_i"}');
    perform jobs.nack(test.jid('rq.job', 'i'), test.claim_of('rq.job', 'i'), null, 'interrupt');
  perform jobs.enqueue('rq.job', 'r', '{}', '{"queue": "q_rq_r"}');
end $$;
create temp table before as select jobs_test.snapshot() as s;
set local jobs.fake_now = '2030-01-01 01:00:00+00';

-- ---------------------------------------------------------------- refusals
select throws_ok(format('select jobs.requeue(array[%s, -1])', test.jid('rq.job', 'f')), 'SJ006', null,
                 'a missing id refuses the call with job_not_found');
select throws_ok(format('select jobs.requeue(array[%s, %s])', test.jid('rq.job', 'f'), test.jid('rq.job', 's')), 'SJ007', null,
                 'a succeeded job refuses the call with job_not_requeueable');
select throws_ok(format('select jobs.requeue(array[%s, %s])', test.jid('rq.job', 'd'), test.jid('rq.job', 'r')), 'SJ008', null,
                 'a ready job refuses the call with job_live');
select throws_ok(format('select jobs.requeue(array[%s, %s])', test.jid('rq.job', 'c'), test.jid('rq.job', 'run')), 'SJ008', null,
                 'a running job: job_live');
select throws_ok(format('select jobs.requeue(array[%s, %s])', test.jid('rq.job', 'f'), test.jid('rq.job', 'p')), 'SJ008', null,
                 'a parked job: job_live');
select throws_ok(format('select jobs.requeue(array[%s, %s])', test.jid('rq.job', 'f'), test.jid('rq.job', 'i')), 'SJ008', null,
                 'an interrupted job: job_live');
select throws_ok('select jobs.requeue(array[]::bigint[])', 'SJ001', null, 'no ids is refused');
select throws_ok('select jobs.requeue(null)', 'SJ001', null, 'null ids are refused');
select throws_ok('select jobs.requeue(array[null]::bigint[])', 'SJ006', null,
                 'a null id is no job: job_not_found');
select throws_ok(format('select jobs.requeue(array[%s, null])', test.jid('rq.job', 'f')), 'SJ006', null,
                 'a null id beside a requeueable job refuses the call too');
select is(jobs_test.snapshot(), (select s from before),
          'no refused call moved anything, not even the requeueable jobs named beside the culprit');

-- ---------------------------------------------------------------- requeue
select lives_ok(format('select jobs.requeue(array[%s, %s, %s])', test.jid('rq.job', 'f'), test.jid('rq.job', 'd'), test.jid('rq.job', 'c')),
                'requeue a failed, a dead and a cancelled job in one call');
select results_eq(
  $$ select key, state::text, attempt, run_at, finished_at, lease_expires_at, result
       from jobs.job where name = 'rq.job' and key in ('f', 'd', 'c') order by key $$,
  $$ values ('c', 'ready', 0, '2030-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, null::jsonb),
            ('d', 'ready', 0, '2030-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, null::jsonb),
            ('f', 'ready', 0, '2030-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, null::jsonb) $$,
  'each is ready, attempt 0, runnable now, no longer finished');
select results_eq(
  $$ select c.key, c.attempt, c.claim >> 32 from jobs.claim('{q_rq_f,q_rq_d,q_rq_c}', 'w', 10, 30) c order by c.key $$,
  $$ values ('c', 1, 2::bigint), ('d', 1, 2::bigint), ('f', 1, 2::bigint) $$,
  'claimed again: attempt 1, and a new claim token, the second (tokens are never reset)');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select state from jobs.job where id = (select test.jid('rq.job', 's'))),
          'succeeded'::jobs.job_state,
          'other jobs were not touched');

-- a duplicate id in the list is harmless
do $$ begin perform jobs.nack(test.jid('rq.job', 'f'), test.claim_of('rq.job', 'f'), null, 'fail'); end $$;
select lives_ok(format('select jobs.requeue(array[%s, %s])', test.jid('rq.job', 'f'), test.jid('rq.job', 'f')),
                'the same id twice is requeued once');
select is((select state from jobs.job where id = (select test.jid('rq.job', 'f'))),
          'ready'::jobs.job_state, 'it is ready');

-- a requeued dead job runs its full retry budget again
do $$ begin perform jobs.nack(test.jid('rq.job', 'd'), test.claim_of('rq.job', 'd')); end $$;
select is((select state from jobs.job where id = (select test.jid('rq.job', 'd'))),
          'dead'::jobs.job_state,
          'setup: it exhausts its one attempt again');
select lives_ok(format('select jobs.requeue(array[%s])', test.jid('rq.job', 'd')), 'and can be requeued again');
select throws_ok(format('select jobs.requeue(array[%s])', test.jid('rq.job', 'd')), 'SJ008', null,
                 'requeue of the now-ready job raises job_live');
select throws_ok(format('select jobs.requeue(array[%s])', test.jid('rq.job', 's')), 'SJ007', null,
                 'requeue of a success alone raises job_not_requeueable');
select is((select count(*)::int from jobs.job where name = 'rq.job'), 8, 'requeue never adds or removes rows');

select * from finish();
rollback;
