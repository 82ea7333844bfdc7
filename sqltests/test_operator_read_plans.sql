-- The operators' reads of a whole fleet read the rows they need through indexes, never
-- the whole table: the dashboard asks jobs.unserved_jobs (sql/45_workers.sql) at every
-- refresh and jobs.list_jobs (sql/92_introspection.sql) for every page of its Jobs
-- view, the CLI's stats jobs.queue_stats_v2 and the bulk verbs' jobs.ids_where and
-- jobs.count_where (sql/90_operator.sql), and a table keeps its finished rows for as
-- long as retention says. Shown on 1,200 jobs that finished two days before (outside the stats' window of
-- 24 hours) beside 3 waiting ones (one of them blocked by a limit), analyzed as
-- autovacuum would: no sequential scan of jobs.job, and the counts right.
begin;
select plan(13);

set local jobs.notify = off;
do $$ begin
  perform jobs.enqueue('up.done', 'k' || i, '{}', '{"queue": "q_up"}') from generate_series(1, 1200) i;
end $$;
create temp table c on commit drop as
select id, claim from jobs.claim('{q_up}', 'w', 1000, 30)
union all
select id, claim from jobs.claim('{q_up}', 'w', 1000, 30);
create temp table acked on commit drop as
select a.ok from jobs.ack_many((select array_agg(id) from (select id from c order by id limit 1190) x),
                               (select array_agg(claim) from (select id, claim from c order by id limit 1190) x),
                               null) a
union all
select n.ok from jobs.nack_many((select array_agg(id) from (select id from c order by id offset 1190) x),
                                (select array_agg(claim) from (select id, claim from c order by id offset 1190) x),
                                null, array_fill('fail'::text, array[10]), null) n;
select is((select count(*)::int from acked where ok), 1200,
          'the 1,200 jobs are settled: 1,190 succeeded, 10 failed for good');
do $$ begin
  perform jobs.enqueue('up.waiting', 'w' || i, '{}', '{"queue": "q_up"}') from generate_series(1, 3) i;
end $$;
-- one of them waits for a limit's slot (as jobs.admit leaves it)
update jobs.job set blocked_on = 'up.limit|'
 where id = (select min(id) from jobs.job where name = 'up.waiting');
analyze jobs.job;
set local jobs.fake_now = '2099-01-01 00:00:00+00';  -- (the clock moved on: the finished jobs are old)

-- this transaction's sequential scans of jobs.job so far
create function pg_temp.job_scans() returns bigint language sql as $$
  select seq_scan from pg_stat_xact_user_tables where schemaname = 'jobs' and relname = 'job'
$$;
create temp table seen on commit drop as select pg_temp.job_scans() as scans;
create temp table unserved on commit drop as
select * from jobs.unserved_jobs() where queue = 'q_up';
select is(pg_temp.job_scans() - (select scans from seen), 0::bigint,
          'unserved_jobs reads jobs.job by index only (no sequential scan)');
select results_eq('select name, waiting from unserved',
                  $$values ('up.waiting'::text, 3::bigint)$$,
                  'the waiting jobs no live worker declares are counted, the blocked one too');


update seen set scans = pg_temp.job_scans();
create temp table stats on commit drop as
select * from jobs.queue_stats_v2() where queue = 'q_up';
select is(pg_temp.job_scans() - (select scans from seen), 0::bigint,
          'queue_stats_v2 reads jobs.job by index only (no sequential scan)');
select is((select ready from stats), 3::bigint, 'queue_stats_v2 counts the 3 waiting jobs as ready');
select is((select succeeded from stats), 0::bigint,
          'the jobs that finished before its window are not counted');

update seen set scans = pg_temp.job_scans();
create temp table newest on commit drop as select id from jobs.list_jobs('{}'::jsonb, null, 10);
create temp table waiting on commit drop as
select id from jobs.list_jobs('{"state": "ready", "queue": "q_up"}'::jsonb);
select is(pg_temp.job_scans() - (select scans from seen), 0::bigint,
          'list_jobs reads a page by index, with or without a state filter (no sequential scan)');
select is((select count(*)::int from newest), 10, 'a page of the newest jobs');
select is((select count(*)::int from waiting), 3, 'a page of the ready jobs: the 3 waiting ones');

-- the bulk retry of every failed job of the queue: found through job_retention_idx
update seen set scans = pg_temp.job_scans();
create temp table retried on commit drop as
select * from jobs.requeue_where('{"queue": "q_up"}'::jsonb, 1000);
select is(pg_temp.job_scans() - (select scans from seen), 0::bigint,
          'requeue_where finds and counts the failed jobs by index (no sequential scan)');
select results_eq('select moved, remaining from retried', $$values (10, 0::bigint)$$,
                  'requeue_where retries the 10 failed jobs, none left');

-- the bulk cancel of every live job of the queue (the 3 waiting, the 10 retried):
-- found through the claimable and the blocked index
update seen set scans = pg_temp.job_scans();
create temp table cancelled on commit drop as
select * from jobs.cancel_where('{"queue": "q_up"}'::jsonb, 1000);
select is(pg_temp.job_scans() - (select scans from seen), 0::bigint,
          'cancel_where finds and counts the live jobs by index (no sequential scan)');
select results_eq('select moved, remaining from cancelled', $$values (13, 0::bigint)$$,
                  'cancel_where cancels the 13 live jobs, none left');

select * from finish();
rollback;
