-- Which queues each call wakes through jobs.wake(queues): enqueue / enqueue_many /
-- enqueue_batch wake each queue that got a job runnable now, once per call; requeue,
-- promote and resume_queue wake the queues they made runnable.
--
-- NOTIFY is delivered only at commit and a pgTAP file never commits, so this file
-- replaces jobs.wake, inside its own transaction (rolled back with it), with a recorder
-- of its calls. What jobs.wake itself sends (pg_notify per queue, nothing under
-- jobs.notify = off) is pinned by the pytest suite across two real sessions.
begin;
select plan(18);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create table jobs_test.wakes (call integer generated always as identity, queues text[]);
create or replace function jobs.wake(p_queues text[]) returns void language sql as $$
  insert into jobs_test.wakes (queues) values (p_queues)
$$;
-- the queues woken since call p_after, sorted, repeats kept
create function jobs_test.woken(p_after integer) returns text[] language sql as $$
  select coalesce(pg_catalog.array_agg(q order by q), '{}')
    from jobs_test.wakes w cross join lateral pg_catalog.unnest(w.queues) q
   where w.call > p_after
$$;
create function jobs_test.last_call() returns integer language sql as $$
  select coalesce(pg_catalog.max(w.call), 0) from jobs_test.wakes w
$$;

create temp table mark as select 0 as c;
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "wake.job", "key": "a1", "queue": "q_wake_a"}, {"name": "wake.job", "key": "a2", "queue": "q_wake_a"},
  {"name": "wake.job", "key": "a3", "queue": "q_wake_a"}, {"name": "wake.job", "key": "b1", "queue": "q_wake_b"},
  {"name": "wake.job", "key": "b2", "queue": "q_wake_b", "run_at": "2029-12-31T00:00:00Z"},
  {"name": "wake.job", "key": "c1", "queue": "q_wake_c", "delay_s": 60}
]') $$, 'enqueue_many: jobs in three queues, those of q_wake_c in the future');
select is(jobs_test.woken((select c from mark)), array['q_wake_a', 'q_wake_b'],
          'each queue with a job runnable now is woken once; a queue with only future jobs is not');

update mark set c = jobs_test.last_call();
select lives_ok($$ select * from jobs.enqueue_batch('{"name": "wake.batch", "queue": "q_wake_e"}',
                                                   array['e1', 'e2', 'e3']) $$,
                'enqueue_batch: three jobs runnable now in one queue');
select is(jobs_test.woken((select c from mark)), array['q_wake_e'], 'wake their queue once');
update mark set c = jobs_test.last_call();
select lives_ok($$ select * from jobs.enqueue_batch('{"name": "wake.batch", "queue": "q_wake_f", "delay_s": 60}',
                                                   array['f1']) $$,
                'enqueue_batch: a job in the future');
select is(jobs_test.woken((select c from mark)), '{}'::text[], 'wakes no queue');
update mark set c = jobs_test.last_call();
select lives_ok($$ select * from jobs.enqueue_batch('{"name": "wake.batch", "queue": "q_wake_e"}',
                                                   array['e1']) $$, 'a deduped enqueue_batch');
select is(jobs_test.woken((select c from mark)), '{}'::text[], 'wakes no queue');

update mark set c = jobs_test.last_call();
select lives_ok($$ select * from jobs.enqueue('wake.job', 'a1', '{}', '{"queue": "q_wake_a"}') $$, 'a deduped enqueue');
select is(jobs_test.woken((select c from mark)), '{}'::text[], 'wakes no queue');

update mark set c = jobs_test.last_call();
select lives_ok($$ select * from jobs.enqueue('wake.job', 'd1', '{}', '{"queue": "q_wake_d"}') $$, 'a single enqueue');
select is(jobs_test.woken((select c from mark)), array['q_wake_d'], 'wakes its queue');

-- requeue and promote
do $$ begin
  perform jobs.nack(c.id, c.claim, null, 'fail') from jobs.claim('{q_wake_d}', 'w', 1, 30) c;
end $$;
update mark set c = jobs_test.last_call();
select lives_ok($$ select jobs.requeue(array(select id from jobs.job where name = 'wake.job' and key = 'd1')) $$,
                'requeue a failed job');
select is(jobs_test.woken((select c from mark)), array['q_wake_d'], 'wakes its queue');

update mark set c = jobs_test.last_call();
select lives_ok($$ select jobs.promote((select id from jobs.job where name = 'wake.job' and key = 'c1')) $$,
                'promote a future job');
select is(jobs_test.woken((select c from mark)), array['q_wake_c'], 'wakes its queue');

update mark set c = jobs_test.last_call();
select lives_ok($$ select jobs.pause_queue('q_wake_e'); select jobs.resume_queue('q_wake_e') $$,
                'pause and resume a queue');
select is(jobs_test.woken((select c from mark)), array['q_wake_e'], 'resume wakes it');

select * from finish();
rollback;
