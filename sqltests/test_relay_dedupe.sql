-- jobs.relay dedupes: a staged row whose key got a job in the meantime (enqueued
-- directly, or a repeated publish) records that job as 'deduped'; no second job.
begin;
select plan(6);

set local jobs.notify = off;
select lives_ok($$ select jobs.stage('rd.job', 'k', '{"from": "outbox"}') $$, 'setup: staged');
select lives_ok($$ select jobs.enqueue('rd.job', 'k', '{"from": "direct"}') $$,
                'setup: the same key enqueued directly before the relay ran');
select is((select held from jobs.relay(10, 'R', 30)), 1, 'the relay claims the row');
select results_eq($$ select published, deduped, held from jobs.relay(10, 'R', 30) $$,
                  $$ values (1, 1, 0) $$, 'the publish answers deduped');
select results_eq($$ select o.outcome, o.job_id = j.id, j.payload->>'from' from jobs.outbox o,
                            jobs.job j where j.key = 'k' $$,
                  $$ values ('deduped', true, 'direct') $$,
                  'the row records the existing job');
select is((select count(*)::int from jobs.job where key = 'k'), 1, 'one job for the key');

select * from finish();
rollback;
