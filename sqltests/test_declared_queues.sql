-- jobs.declared_queues() (sql/93_metrics.sql): every queue named by a pause switch, a
-- job type, a worker, a queue limit, a schedule's queue option or a queue's retention
-- row, once each, in order, reading no job; and jobs.queue_gauges() lists those with
-- zeros beside the queues that hold live or dead jobs, so the dashboard and the
-- metrics list one set. Granted to the reader; refused to a tenant-bound session.
begin;
select plan(10);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

select has_function('jobs', 'declared_queues', '{}'::name[], 'jobs.declared_queues() exists');
select is((select count(*)::int from jobs.declared_queues()), 0, 'nothing declared: no queue');

do $$ begin
  perform jobs.pause_queue('dq_paused');
  perform jobs.job_type_put('dq.typed', '{"queue": "dq_typed"}');
  perform jobs.job_type_put('dq.untyped', '{}');  -- no queue: names none
  perform jobs.worker_heartbeat('dq-worker', array['dq_worker_a', 'dq_typed'], array['dq.typed'], 2, 30,
                                'host', 1, '{}');
  perform jobs.limit_put('dq_limit', '{"scope": "queue", "target": "dq_limited", "concurrency": 2}');
  perform jobs.limit_put('dq_name_limit', '{"scope": "name", "target": "dq.typed", "concurrency": 2}');
  perform jobs.schedule_put('dq-nightly', '{"job": "dq.typed", "cron": "0 3 * * *", "options": {"queue": "dq_scheduled"}}');
  perform jobs.schedule_put('dq-plain', '{"job": "dq.typed", "cron": "0 4 * * *"}');
  perform jobs.retention_put('dq_kept', '{"succeeded": 60}');
  perform jobs.retention_put('*', '{"succeeded": 120}');
end $$;
select is(array(select q.queue from jobs.declared_queues() q),
          array['dq_kept', 'dq_limited', 'dq_paused', 'dq_scheduled', 'dq_typed', 'dq_worker_a'],
          'each source names its queue, once, sorted; a name limit, a schedule without a queue and the ''*'' retention row name none');

-- queue_gauges: the declared queues with zeros, and a queue that only holds a job
do $$ begin
  perform jobs.enqueue('dq.live', 'l1', '{}', '{"queue": "dq_live"}');
  perform jobs.enqueue('dq.typed', 't1', '{}', '{"queue": "dq_typed"}');
end $$;
select is(array(select g.queue from jobs.queue_gauges() g where g.queue like 'dq\_%'),
          array['dq_kept', 'dq_limited', 'dq_live', 'dq_paused', 'dq_scheduled', 'dq_typed', 'dq_worker_a'],
          'queue_gauges lists every declared queue and every queue with a live job');
select results_eq(
  $$ select ready, running, dead, paused from jobs.queue_gauges() where queue in ('dq_kept', 'dq_paused') order by queue $$,
  $$ values (0::bigint, 0::bigint, 0::bigint, false), (0, 0, 0, true) $$,
  'a declared queue holding nothing counts zeros (and shows its pause)');
select is((select ready from jobs.queue_gauges() where queue = 'dq_typed'), 1::bigint,
          'a declared queue with a job counts it');
-- once its job finished, a declared queue stays; an undeclared one goes
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
do $$ begin
  perform jobs.cancel(x.id)
     from (with x as materialized (select j.id from jobs.job j where j.key in ('l1', 't1'))
           select * from x) x;
end $$;
select is(array(select g.queue from jobs.queue_gauges() g where g.queue in ('dq_live', 'dq_typed')),
          array['dq_typed'], 'with its jobs finished, the declared queue is listed, the undeclared one is not');

-- who may call it
set local role sqljobs_reader;
select lives_ok($$ select jobs.declared_queues() $$, 'reader: jobs.declared_queues');
set local role sqljobs_producer;
select throws_ok($$ select jobs.declared_queues() $$, '42501', null, 'producer cannot call it');
reset role;
set local sqljobs.tenant = 'acme';
select throws_ok($$ select jobs.declared_queues() $$, 'SJ018', null,
                 'a tenant-bound session is refused (it names every tenant''s queues)');

select * from finish();
rollback;
