-- Every way out of running frees the job's limit slots (jobs.release_slots, called by
-- each settling function since no trigger on jobs.job does it): an ack, a nack that
-- retries or parks, an operator's cancel, the cancel of a compensable job (which
-- unwinds it), the settle that ends an unwind, lease recovery. A key limit of one slot
-- per key makes each release visible: the waiting job of the same key becomes
-- claimable, and the slot table holds only running jobs' rows.
begin;
select plan(22);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema sr;
-- (verbs called on rows read first: distributed on Citus, a function per row of a query
-- over the jobs would run on a shard)
-- the jobs of the running state's keys, and the slot rows that are not a running job's
create function sr.running() returns setof text language sql as $$
  select j.key from jobs.job j where j.queue = 'sr' and j.state = 'running' order by j.key $$;
create function sr.orphans() returns bigint language sql as $$
  select count(*) from jobs.slot s join jobs.job j on j.id = s.job_id and j.bucket = s.bucket
   where j.state <> 'running' $$;  -- (the bucket too: distributed, a co-located join)
create function sr.claim() returns setof text language sql as $$
  select c.key from jobs.claim(array['sr'], 'w', 10, 30) c order by c.key $$;

select ok(jobs.limit_put('per_key', '{"scope": "key", "target": "sr.job", "key": "k", "concurrency": 1}'),
          'setup: one running job per payload k');
-- (one tenant: distributed, claim order holds within a shard, and a tenant is on one)
select lives_ok($$ select * from jobs.enqueue_many((select jsonb_agg(jsonb_build_object(
  'name', 'sr.job', 'key', k || n, 'queue', 'sr', 'tenant', 'sr',
  'payload', jsonb_build_object('k', k)))
  from unnest(array['a', 'b', 'c', 'd', 'e', 'f']) k, generate_series(1, 2) n)) $$,
  'two jobs for each of six keys');
select results_eq($$ select sr.claim() $$,
                  $$ values ('a1'), ('b1'), ('c1'), ('d1'), ('e1'), ('f1') $$,
                  'the first of each key runs; the second waits for its slot');

-- ---------------------------------------------------------------- a plain cancel
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'a1')
                    select jobs.cancel(id) from j $$, 'a1 is cancelled while running');
select is(sr.orphans(), 0::bigint, 'the cancel freed its slot');
select results_eq($$ select sr.claim() $$, $$ values ('a2') $$, 'a2 takes it');

-- ---------------------------------------------------------------- a park
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'b1')
                    select jobs.nack(id, claim, null, 'park', 60) from j $$,
                'b1 parks (a durable sleep)');
select is(sr.orphans(), 0::bigint, 'the park freed its slot');
select results_eq($$ select sr.claim() $$, $$ values ('b2') $$, 'b2 takes it');

-- ---------------------------------------------------------------- a compensable job's cancel unwinds it
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'c1')
                    select jobs.step_put(id, claim, 'book', '1', null, '{"compensable": true}')
                      from j $$, 'c1 stores a compensable step');
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'c1')
                    select jobs.cancel(id) from j $$, 'c1 is cancelled while running');
select results_eq($$ select state::text, compensating from jobs.job where key = 'c1' $$,
                  $$ values ('ready', true) $$, 'c1 waits to unwind');
select is(sr.orphans(), 0::bigint, 'its run ended: its slot is free');
select results_eq($$ select sr.claim() $$, $$ values ('c1') $$,
                  'c1, first in line, takes its key''s slot again to unwind');

-- ---------------------------------------------------------------- the unwind's settle
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'c1')
                    select jobs.step_unwound(id, claim) from j $$,
                'c1''s unwind settles it cancelled');
select is(sr.orphans(), 0::bigint, 'the settle freed its slot');
select results_eq($$ select sr.claim() $$, $$ values ('c2') $$, 'c2 takes it');

-- ---------------------------------------------------------------- a cancel during an unwind
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'd1')
                    select jobs.step_put(id, claim, 'book', '1', null, '{"compensable": true}')
                      from j $$, 'd1 stores a compensable step');
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'd1')
                    select jobs.nack(id, claim, '{"message": "no"}', 'fail') from j $$,
                'd1 fails for good: it unwinds, still running under its claim');
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'd1')
                    select jobs.cancel(id) from j $$, 'd1 is cancelled mid-unwind');
select results_eq($$ select state::text, compensating, jsonb_array_length(coalesce(attempts, '[]')),
                            (select count(*) from jobs.slot s
                              where s.job_id = j.id and s.bucket = j.bucket)
                       from jobs.job j where key = 'd1' $$,
                  $$ values ('running', true, 1, 1::bigint) $$,
                  'the cancel changed nothing: still running, its failed attempt the only one in its history, its slot held');

-- ---------------------------------------------------------------- lease recovery
set local jobs.fake_now = '2030-01-01 00:00:31+00';  -- every 30 s lease lapsed
select results_eq($$ select sr.claim() $$,
                  $$ values ('a2'), ('b2'), ('c2'), ('d1'), ('e1'), ('f1') $$,
                  'recovery frees every lapsed run''s slot, and each recovered job, first in line, takes it again');

select * from finish();
rollback;
