-- jobs.enqueue / enqueue_many wake-ups: the `jobs.notify = off` path.
--
-- Delivery of the 'jobs_wake' notification is NOT pinned here: PostgreSQL queues a
-- NOTIFY only when the transaction commits, and a pgTAP file never commits, so no SQL
-- inside it can observe the notification (pg_notification_queue_usage() and LISTEN
-- both see it only after commit). test_wake_callers.sql pins which queues each call
-- hands to jobs.wake; the pytest suite pins delivery across two real sessions.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

select is((select outcome from jobs.enqueue('notify.job', 'on', '{}', '{"queue": "q_notify"}')), 'created',
          'with notify on (the default), enqueue works');

set local jobs.notify = off;
select is((select outcome from jobs.enqueue('notify.job', 'off', '{}', '{"queue": "q_notify"}')), 'created',
          'with jobs.notify = off, enqueue still works');
select results_eq(
  $$ select ord, outcome from jobs.enqueue_many('[{"name": "notify.job", "key": "off2", "queue": "q_notify"},
                                                  {"name": "notify.job", "key": "off3", "queue": "q_notify_b"}]')
      order by ord $$,
  $$ values (1, 'created'), (2, 'created') $$,
  'with jobs.notify = off, enqueue_many still works');
select is((select outcome from jobs.enqueue('notify.job', 'off', '{}', '{"queue": "q_notify"}')), 'deduped',
          'with jobs.notify = off, dedup still works');
select is((select count(*)::int from jobs.job where name = 'notify.job' and state = 'ready'), 4,
          'every job was written as ready');
select is((select count(*)::int from jobs.claim('{q_notify,q_notify_b}', 'w', 10, 30)), 4,
          'and is claimable without any wake-up');
select lives_ok($$ select jobs.resume_queue('q_notify') $$, 'with jobs.notify = off, resume_queue works');
select lives_ok($$ select jobs.wake(array['q_notify', 'q_notify_b']) $$, 'with jobs.notify = off, jobs.wake runs');
set local jobs.notify = on;
select lives_ok($$ select jobs.wake(array['q_notify']) $$, 'with jobs.notify = on, jobs.wake runs');

select * from finish();
rollback;
