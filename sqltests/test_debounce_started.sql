-- A debounced job waits to start only until its first claim: once started and awaiting
-- its retry, the next enqueue of its group makes a new job, and the retry keeps its
-- payload and its time (docs/howto-limits.md).
begin;
select plan(5);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
do $$ declare c bigint; begin
  perform jobs.enqueue('db.job', 'x1', '{"v": 1}', '{"queue": "q_db", "debounce_s": 5, "max_attempts": 3}');
  perform pg_catalog.set_config('jobs.fake_now', '2030-01-01 00:00:06+00', true);
  select cl.claim into c from jobs.claim('{q_db}', 'w', 1, 30) cl;
  perform jobs.nack(x.id, c, '{"message": "again"}', 'retry', 60)
     from (with x as materialized (select j.id from jobs.job j where j.key = 'x1')
           select * from x) x;
end $$;

select is((select outcome from jobs.enqueue('db.job', 'x2', '{"v": 2}', '{"queue": "q_db", "debounce_s": 5}')),
          'created', 'the next enqueue of the group makes a new job');
select is((select payload from jobs.job where key = 'x1'), '{"v": 1}'::jsonb, 'the retry keeps its payload');
select is((select run_at from jobs.job where key = 'x1'), '2030-01-01 00:01:06+00'::timestamptz,
          'and its time');
select is((select outcome || ':' || (id = (select id from jobs.job where key = 'x2'))::text
             from jobs.enqueue('db.job', 'x3', '{"v": 3}', '{"queue": "q_db", "debounce_s": 5}')),
          'debounced:true', 'a third enqueue collapses into the new, unstarted job');
select is((select payload from jobs.job where key = 'x2'), '{"v": 3}'::jsonb, 'which takes its payload');

select * from finish();
rollback;
