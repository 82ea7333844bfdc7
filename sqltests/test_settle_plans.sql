-- The settle batches' plans (sql/40_settle.sql): jobs.ack_batch, jobs.nack_batch,
-- jobs.heartbeat_many and jobs.lock_batch keep one generic plan per session, which
-- knows neither the batch's size nor the table's, so they turn sequential and bitmap
-- scans off (and JIT, which the disabled costs would trigger): every job is found by a
-- primary-key probe. Shown on a table the planner has no statistics of, where a plan
-- would otherwise scan it whole: a heartbeat of 240 jobs, six acks of 40 and a nack of
-- 40 read jobs.job with no sequential scan.
begin;
select plan(4);

set local jobs.notify = off;
do $$ begin
  perform jobs.enqueue('sp.job', 'k' || i, '{}', '{"queue": "q_sp"}') from generate_series(1, 280) i;
end $$;
create temp table c on commit drop as select id, claim from jobs.claim('{q_sp}', 'w', 280, 30);
create temp table seen (scans bigint) on commit drop;
insert into seen select seq_scan from pg_stat_xact_user_tables
 where schemaname = 'jobs' and relname = 'job';

create temp table beat on commit drop as
select h.ok from jobs.heartbeat_many((select array_agg(id order by id) from c),
                                     (select array_agg(claim order by id) from c), 30) h;
create temp table acked on commit drop as
select a.ok
  from generate_series(0, 5) b
 cross join lateral jobs.ack_many(
   (select array_agg(id order by id) from (select id from c order by id offset b * 40 limit 40) x),
   (select array_agg(claim order by id) from (select id, claim from c order by id offset b * 40 limit 40) x),
   null) a;
create temp table nacked on commit drop as
select n.ok
  from jobs.nack_many(
    (select array_agg(id order by id) from (select id from c order by id offset 240) x),
    (select array_agg(claim order by id) from (select id, claim from c order by id offset 240) x),
    null, array_fill('fail'::text, array[40]), null) n;
select is((select seq_scan from pg_stat_xact_user_tables where schemaname = 'jobs' and relname = 'job')
            - (select scans from seen), 0::bigint,
          'the heartbeat, the acks and the nack read jobs.job by index only (no sequential scan)');
select is((select count(*)::int from beat where ok), 280, 'heartbeat_many renews every job of the batch');
select is((select count(*)::int from acked where ok), 240, 'six ack_many batches settle their jobs');
select is((select count(*)::int from nacked where ok), 40, 'nack_many fails the rest');

select * from finish();
rollback;
