-- jobs.remove(id): delete a job in any state but running. Errors: job_running (SJ009),
-- job_not_found (SJ006); each changes nothing. A removed key can be enqueued afresh.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.id(p_key text) returns bigint language sql as $$
  select j.id from jobs.job j where j.name = 'remove.job' and j.key = p_key
$$;
create function jobs_test.start(p_key text) returns void language plpgsql as $$
begin
  perform jobs.enqueue('remove.job', p_key, '{}', pg_catalog.jsonb_build_object('queue', 'q_remove_' || p_key));
  perform from jobs.claim(array['q_remove_' || p_key], 'w', 1, 30);
end $$;

do $$ begin
  perform jobs.enqueue('remove.job', 'ready', '{}', '{"queue": "q_remove_ready"}');
  perform jobs_test.start('run');
  perform jobs_test.start('park');  perform jobs.nack(jobs_test.id('park'), 1, null, 'park');
  perform jobs_test.start('int');   perform jobs.nack(jobs_test.id('int'), 1, null, 'interrupt');
  perform jobs_test.start('done');  perform jobs.ack(jobs_test.id('done'), 1);
  perform jobs_test.start('fail');  perform jobs.nack(jobs_test.id('fail'), 1, null, 'fail');
  perform jobs.enqueue('remove.job', 'dead', '{}', '{"queue": "q_remove_dead", "max_attempts": 1}');
  perform from jobs.claim('{q_remove_dead}', 'w', 1, 30);
  perform jobs.nack(jobs_test.id('dead'), 1);
  perform jobs.enqueue('remove.job', 'cancel', '{}', '{"queue": "q_remove_cancel"}');
  perform jobs.cancel(jobs_test.id('cancel'));
end $$;
select results_eq($$ select j.state::text from jobs.job j where j.name = 'remove.job' order by j.state $$,
                  $$ values ('ready'), ('running'), ('parked'), ('succeeded'), ('failed'), ('dead'),
                            ('cancelled'), ('interrupted') $$,
                  'setup: one job in every state');

select throws_ok(format('select jobs.remove(%s)', jobs_test.id('run')), 'SJ009', null,
                 'remove of a running job raises job_running');
select is((select state from jobs.job where id = jobs_test.id('run')), 'running'::jobs.job_state, 'it is still there, running');
select throws_ok('select jobs.remove(-1)', 'SJ006', null, 'remove of a missing job raises job_not_found');

select lives_ok(format('select jobs.remove(%s)', jobs_test.id('ready')), 'remove a ready job');
select lives_ok(format('select jobs.remove(%s)', jobs_test.id('park')), 'remove a parked job');
select lives_ok(format('select jobs.remove(%s)', jobs_test.id('int')), 'remove an interrupted job');
select lives_ok(format('select jobs.remove(%s)', jobs_test.id('done')), 'remove a succeeded job');
select lives_ok(format('select jobs.remove(%s)', jobs_test.id('fail')), 'remove a failed job');
select lives_ok(format('select jobs.remove(%s)', jobs_test.id('dead')), 'remove a dead job');
select lives_ok(format('select jobs.remove(%s)', jobs_test.id('cancel')), 'remove a cancelled job');
select results_eq($$ select key from jobs.job where name = 'remove.job' $$, $$ values ('run') $$,
                  'they are deleted; the running job remains');

select is((select outcome from jobs.enqueue('remove.job', 'done')), 'created',
          'a removed job''s key is free: enqueue creates a new job');
create temp table gone as select pg_catalog.max(id) as id from jobs.job;
select throws_ok(format('select jobs.remove(%s)', (select id from gone) + 1000), 'SJ006', null,
                 'an id that was never used raises job_not_found');

select * from finish();
rollback;
