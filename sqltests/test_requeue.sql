-- jobs.requeue(ids): failed, dead and cancelled jobs -> ready, attempt 0, run now, in
-- one statement. Refuses the whole call, changing nothing, on a missing id
-- (job_not_found SJ006), a succeeded job (job_not_requeueable SJ007) or a live one
-- (job_live SJ008).
begin;
select plan(20);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.id(p_key text) returns bigint language sql as $$
  select j.id from jobs.job j where j.name = 'rq.job' and j.key = p_key
$$;
create function jobs_test.start(p_key text, p_options jsonb default '{}') returns void language plpgsql as $$
begin
  perform jobs.enqueue('rq.job', p_key, '{}', p_options || pg_catalog.jsonb_build_object('queue', 'q_rq_' || p_key));
  perform from jobs.claim(array['q_rq_' || p_key], 'w', 1, 30);
end $$;
-- the state of every job, to show a refusal changed nothing
create function jobs_test.snapshot() returns text language sql as $$
  select pg_catalog.string_agg(pg_catalog.concat_ws('/', j.key, j.state, j.attempt, j.run_at, j.finished_at), ' '
                               order by j.key)
    from jobs.job j where j.name = 'rq.job'
$$;

do $$ begin
  perform jobs_test.start('f');  perform jobs.nack(jobs_test.id('f'), 1, '{"m": "f"}', 'fail');
  perform jobs_test.start('d', '{"max_attempts": 1}');  perform jobs.nack(jobs_test.id('d'), 1, '{"m": "d"}');
  perform jobs_test.start('c');  perform jobs.cancel(jobs_test.id('c'));
  perform jobs_test.start('s');  perform jobs.ack(jobs_test.id('s'), 1, '"ok"');
  perform jobs_test.start('run');
  perform jobs_test.start('p');  perform jobs.nack(jobs_test.id('p'), 1, null, 'park');
  perform jobs_test.start('i');  perform jobs.nack(jobs_test.id('i'), 1, null, 'interrupt');
  perform jobs.enqueue('rq.job', 'r', '{}', '{"queue": "q_rq_r"}');
end $$;
create temp table before as select jobs_test.snapshot() as s;
set local jobs.fake_now = '2030-01-01 01:00:00+00';

-- ---------------------------------------------------------------- refusals
select throws_ok(format('select jobs.requeue(array[%s, -1])', jobs_test.id('f')), 'SJ006', null,
                 'a missing id refuses the call with job_not_found');
select throws_ok(format('select jobs.requeue(array[%s, %s])', jobs_test.id('f'), jobs_test.id('s')), 'SJ007', null,
                 'a succeeded job refuses the call with job_not_requeueable');
select throws_ok(format('select jobs.requeue(array[%s, %s])', jobs_test.id('d'), jobs_test.id('r')), 'SJ008', null,
                 'a ready job refuses the call with job_live');
select throws_ok(format('select jobs.requeue(array[%s, %s])', jobs_test.id('c'), jobs_test.id('run')), 'SJ008', null,
                 'a running job: job_live');
select throws_ok(format('select jobs.requeue(array[%s, %s])', jobs_test.id('f'), jobs_test.id('p')), 'SJ008', null,
                 'a parked job: job_live');
select throws_ok(format('select jobs.requeue(array[%s, %s])', jobs_test.id('f'), jobs_test.id('i')), 'SJ008', null,
                 'an interrupted job: job_live');
select throws_ok('select jobs.requeue(array[]::bigint[])', 'SJ001', null, 'no ids is refused');
select throws_ok('select jobs.requeue(null)', 'SJ001', null, 'null ids are refused');
select is(jobs_test.snapshot(), (select s from before),
          'no refused call moved anything, not even the requeueable jobs named beside the culprit');

-- ---------------------------------------------------------------- requeue
select lives_ok(format('select jobs.requeue(array[%s, %s, %s])', jobs_test.id('f'), jobs_test.id('d'), jobs_test.id('c')),
                'requeue a failed, a dead and a cancelled job in one call');
select results_eq(
  $$ select key, state::text, attempt, run_at, finished_at, lease_expires_at, result
       from jobs.job where name = 'rq.job' and key in ('f', 'd', 'c') order by key $$,
  $$ values ('c', 'ready', 0, '2030-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, null::jsonb),
            ('d', 'ready', 0, '2030-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, null::jsonb),
            ('f', 'ready', 0, '2030-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, null::jsonb) $$,
  'each is ready, attempt 0, runnable now, no longer finished');
select results_eq(
  $$ select c.key, c.attempt, c.claim from jobs.claim('{q_rq_f,q_rq_d,q_rq_c}', 'w', 10, 30) c order by c.key $$,
  $$ values ('c', 1, 2::bigint), ('d', 1, 2::bigint), ('f', 1, 2::bigint) $$,
  'claimed again: attempt 1, and a new claim token (tokens are never reset)');
select is((select state from jobs.job where id = jobs_test.id('s')), 'succeeded'::jobs.job_state,
          'other jobs were not touched');

-- a duplicate id in the list is harmless
do $$ begin perform jobs.nack(jobs_test.id('f'), 2, null, 'fail'); end $$;
select lives_ok(format('select jobs.requeue(array[%s, %s])', jobs_test.id('f'), jobs_test.id('f')),
                'the same id twice is requeued once');
select is((select state from jobs.job where id = jobs_test.id('f')), 'ready'::jobs.job_state, 'it is ready');

-- a requeued dead job runs its full retry budget again
do $$ begin perform jobs.nack(jobs_test.id('d'), 2); end $$;
select is((select state from jobs.job where id = jobs_test.id('d')), 'dead'::jobs.job_state,
          'setup: it exhausts its one attempt again');
select lives_ok(format('select jobs.requeue(array[%s])', jobs_test.id('d')), 'and can be requeued again');
select throws_ok(format('select jobs.requeue(array[%s])', jobs_test.id('d')), 'SJ008', null,
                 'requeue of the now-ready job raises job_live');
select throws_ok(format('select jobs.requeue(array[%s])', jobs_test.id('s')), 'SJ007', null,
                 'requeue of a success alone raises job_not_requeueable');
select is((select count(*)::int from jobs.job where name = 'rq.job'), 8, 'requeue never adds or removes rows');

select * from finish();
rollback;
