-- jobs.cancel(id): a live job (ready, running, parked, interrupted) -> cancelled,
-- finished now. A running worker's heartbeat then answers false and its ack raises
-- lease_lost. Errors: job_not_found (SJ006), job_finished (SJ010); both change nothing.
begin;
select plan(19);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.job / test.claim_of: sqltests/_helpers.sql)

do $$ begin
  perform jobs.enqueue('cancel.job', 'ready', '{}', '{"queue": "q_cancel_ready", "delay_s": 60}');
  perform test.start('cancel.job', 'running', '{"queue": "q_cancel_running"}');
  perform test.start('cancel.job', 'parked', '{"queue": "q_cancel_parked"}');
  perform jobs.nack(test.jid('cancel.job', 'parked'), test.claim_of('cancel.job', 'parked'), null, 'park');
  perform test.start('cancel.job', 'int', '{"queue": "q_cancel_int"}');
  perform jobs.nack(test.jid('cancel.job', 'int'), test.claim_of('cancel.job', 'int'), null, 'interrupt');
  perform test.start('cancel.job', 'done', '{"queue": "q_cancel_done"}');
  perform jobs.ack(test.jid('cancel.job', 'done'), test.claim_of('cancel.job', 'done'), '{"r": 1}');
end $$;
set local jobs.fake_now = '2030-01-01 00:00:05+00';

select lives_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'ready')), 'cancel a ready job');
select lives_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'parked')), 'cancel a parked job');
select lives_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'int')), 'cancel an interrupted job');
select lives_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'running')), 'cancel a running job');
select results_eq(
  $$ select key, state::text, finished_at, lease_expires_at from jobs.job
      where name = 'cancel.job' and key in ('ready', 'parked', 'int', 'running') order by key $$,
  $$ values ('int', 'cancelled', '2030-01-01 00:00:05+00'::timestamptz, null::timestamptz),
            ('parked', 'cancelled', '2030-01-01 00:00:05+00'::timestamptz, null::timestamptz),
            ('ready', 'cancelled', '2030-01-01 00:00:05+00'::timestamptz, null::timestamptz),
            ('running', 'cancelled', '2030-01-01 00:00:05+00'::timestamptz, null::timestamptz) $$,
  'each is cancelled, finished now, with no lease');

-- the worker of the cancelled running job
select is(jobs.heartbeat(test.jid('cancel.job', 'running'), test.claim_of('cancel.job', 'running'), 30), false,
          'the running worker''s next heartbeat (under its own claim token) answers false');
select is(jobs.progress(test.jid('cancel.job', 'running'), test.claim_of('cancel.job', 'running'), '{"p": 1}'),
          false, 'its progress answers false');
select throws_ok(format('select jobs.ack(%s, %s)', test.jid('cancel.job', 'running'),
                        test.claim_of('cancel.job', 'running')), 'SJ004', null,
                 'its ack raises lease_lost');
select is((test.job('cancel.job', 'running')).state, 'cancelled'::jobs.job_state, 'the job stays cancelled');

select is((select count(*)::int from jobs.claim('{q_cancel_ready,q_cancel_parked,q_cancel_int,q_cancel_running}', 'w', 10, 30)),
          0, 'cancelled jobs are never claimed');

-- ---------------------------------------------------------------- refusals
select throws_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'done')), 'SJ010', null,
                 'cancel of a succeeded job raises job_finished');
select throws_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'ready')), 'SJ010', null,
                 'cancel of a cancelled job raises job_finished');
select results_eq($$ select state::text, result, finished_at from jobs.job where name = 'cancel.job' and key = 'done' $$,
                  $$ values ('succeeded', '{"r": 1}'::jsonb, '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'the refused cancel changed nothing');
select is((test.job('cancel.job', 'ready')).finished_at, '2030-01-01 00:00:05+00'::timestamptz,
          'a second cancel does not move finished_at');
select throws_ok('select jobs.cancel(-1)', 'SJ006', null, 'cancel of a missing job raises job_not_found');

select lives_ok($$ select * from jobs.enqueue('cancel.job', 'dead', '{}', '{"queue": "q_cancel_dead", "max_attempts": 1}') $$,
                'setup: a job...');
do $$ begin
  perform jobs.nack(c.id, c.claim) from jobs.claim('{q_cancel_dead}', 'w', 1, 30) c;
end $$;
select throws_ok(format('select jobs.cancel(%s)', test.jid('cancel.job', 'dead')), 'SJ010', null,
                 '...that is dead: cancel raises job_finished');

-- the running attempt the cancel ended joins the attempt history; a waiting job has none
select is((select a->>'outcome' || ' ' || (a->>'attempt') || ' ' || (a->>'ended_at')::timestamptz::text
             from jobs.job j, pg_catalog.jsonb_array_elements(j.attempts) a
            where j.name = 'cancel.job' and j.key = 'running'),
          'cancelled 1 2030-01-01 00:00:05+00', 'a cancelled run joins the attempt history');
select is((test.job('cancel.job', 'ready')).attempts, null, 'a cancelled job that never ran has no history');
select * from finish();
rollback;
