-- jobs.remove(id): delete a job in any state but running. Errors: job_running (SJ009),
-- job_not_found (SJ006); each changes nothing. A removed key can be enqueued afresh.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.jid / test.claim_of: sqltests/_helpers.sql): each started job in its
-- own queue q_remove_<key>

do $$ begin
  perform jobs.enqueue('remove.job', 'ready', '{}', '{"queue": "q_remove_ready"}');
  perform test.start('remove.job', 'run', '{"queue": "q_remove_run"}');
  perform test.start('remove.job', 'park', '{"queue": "q_remove_park"}');
    perform jobs.nack(test.jid('remove.job', 'park'), test.claim_of('remove.job', 'park'), null, 'park');
  perform test.start('remove.job', 'int', '{"queue": "q_remove_int"}');
    perform jobs.nack(test.jid('remove.job', 'int'), test.claim_of('remove.job', 'int'), null, 'interrupt');
  perform test.start('remove.job', 'done', '{"queue": "q_remove_done"}');
    perform jobs.ack(test.jid('remove.job', 'done'), test.claim_of('remove.job', 'done'));
  perform test.start('remove.job', 'fail', '{"queue": "q_remove_fail"}');
    perform jobs.nack(test.jid('remove.job', 'fail'), test.claim_of('remove.job', 'fail'), null, 'fail');
  perform jobs.enqueue('remove.job', 'dead', '{}', '{"queue": "q_remove_dead", "max_attempts": 1}');
  perform from jobs.claim('{q_remove_dead}', 'w', 1, 30);
  perform jobs.nack(test.jid('remove.job', 'dead'), test.claim_of('remove.job', 'dead'));
  perform jobs.enqueue('remove.job', 'cancel', '{}', '{"queue": "q_remove_cancel"}');
  perform jobs.cancel(test.jid('remove.job', 'cancel'));
end $$;
select results_eq($$ select j.state::text from jobs.job j where j.name = 'remove.job' order by j.state $$,
                  $$ values ('ready'), ('running'), ('parked'), ('succeeded'), ('failed'), ('dead'),
                            ('cancelled'), ('interrupted') $$,
                  'setup: one job in every state');

select throws_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'run')), 'SJ009', null,
                 'remove of a running job raises job_running');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select state from jobs.job where id = (select test.jid('remove.job', 'run'))),
          'running'::jobs.job_state, 'it is still there, running');
select throws_ok('select jobs.remove(-1)', 'SJ006', null, 'remove of a missing job raises job_not_found');

select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'ready')), 'remove a ready job');
select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'park')), 'remove a parked job');
select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'int')), 'remove an interrupted job');
select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'done')), 'remove a succeeded job');
select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'fail')), 'remove a failed job');
select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'dead')), 'remove a dead job');
select lives_ok(format('select jobs.remove(%s)', test.jid('remove.job', 'cancel')), 'remove a cancelled job');
select results_eq($$ select key from jobs.job where name = 'remove.job' $$, $$ values ('run') $$,
                  'they are deleted; the running job remains');

select is((select outcome from jobs.enqueue('remove.job', 'done')), 'created',
          'a removed job''s key is free: enqueue creates a new job');
create temp table gone as select pg_catalog.max(id) as id from jobs.job;
select throws_ok(format('select jobs.remove(%s)', (select id from gone) + 1000), 'SJ006', null,
                 'an id that was never used raises job_not_found');

select * from finish();
rollback;
