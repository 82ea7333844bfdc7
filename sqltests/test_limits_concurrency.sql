-- Concurrency limits in jobs.claim: a claim never returns a job that would exceed a
-- limit; a refused job waits (blocked_on, not claimable, no attempt counted) until a
-- slot of its group frees — by a settle, or by lease recovery of a lapsed run — and a
-- key limit with when_busy = 'fail' fails a job only while a live lease holds its key.
begin;
select plan(34);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema lc;
-- (PL/pgSQL on custom plans, and a verb called on rows read first: distributed on
-- Citus, a statement over the jobs with a parameter needs its value to be planned, and
-- a function per row of a query over the jobs would run on a shard)
create function lc.state(p_key text) returns table (state text, attempt int, blocked_on text)
language plpgsql set plan_cache_mode = force_custom_plan as $$
begin
  return query select j.state::text, j.attempt, j.blocked_on from jobs.job j where j.key = p_key;
end $$;
create function lc.claim(p_queue text, p_n int) returns setof text language sql as $$
  select c.key from jobs.claim(array[p_queue], 'w', p_n, 30) c order by c.key $$;

-- ---------------------------------------------------------------- global
select ok(jobs.limit_put('g', '{"scope": "global", "concurrency": 2}'), 'setup: limit g');
select lives_ok($$ select * from jobs.enqueue_many((select jsonb_agg(jsonb_build_object(
  'name', 'lc.a', 'key', 'g' || i, 'queue', 'lc_g')) from generate_series(1, 5) i)) $$, 'five jobs');
select results_eq($$ select lc.claim('lc_g', 10) $$, $$ values ('g1'), ('g2') $$,
                  'asked for ten, the global limit of 2 gives two');
select results_eq($$ select key, blocked_on, attempt from jobs.job where queue = 'lc_g' and state = 'ready' order by key $$,
                  $$ values ('g3', null::text, 0), ('g4', null, 0), ('g5', null, 0) $$,
                  'the others wait, claimable (a full global limit holds back every job alike), no attempt counted');
select is((select slots from jobs.job where key = 'g1'), array['g|'], 'a running job holds its slot');
select results_eq($$ select queue, ready, running, limited from jobs.queue_stats_v2() where queue = 'lc_g' $$,
                  $$ values ('lc_g', 3::bigint, 2::bigint, 3::bigint) $$,
                  'queue_stats counts the jobs a limit holds back');
select results_eq($$ select limit_name, grp, concurrency, running, waiting from jobs.limit_stats() $$,
                  $$ values ('g', 'g|', 2, 2::bigint, 3::bigint) $$,
                  'limit_stats shows the group''s use and its waiters');
select is((select count(*)::int from jobs.claim('{lc_g}', 'w', 10, 30)), 0, 'full: nothing more');
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'g1')
                    select jobs.ack(id, claim) from j $$, 'g1 finishes');
select results_eq($$ select lc.claim('lc_g', 10) $$, $$ values ('g3') $$, 'the next claim takes its slot');
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'g2')
                    select jobs.nack(id, claim, '{"message": "x"}', 'retry', 0) from j $$,
                'g2 fails an attempt (a retry frees its slot too)');
select results_eq($$ select lc.claim('lc_g', 10) $$, $$ values ('g2') $$,
                  'the freed slot goes to the first claimable job in claim order');
select lives_ok($$ select jobs.limit_remove('g') $$, 'the limit goes');
select results_eq($$ select lc.claim('lc_g', 10) $$, $$ values ('g4'), ('g5') $$, 'its waiters are claimable');
select lives_ok($$ with j as materialized (select * from jobs.job where queue = 'lc_g' and state = 'running')
                    select jobs.ack(id, claim) from j $$, 'clean up');

-- ---------------------------------------------------------------- lapsed lease frees the slot
select ok(jobs.limit_put('n', '{"scope": "name", "target": "lc.b", "concurrency": 1}'), 'setup: limit n');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "lc.b", "key": "b1", "queue": "lc_b"},
  {"name": "lc.b", "key": "b2", "queue": "lc_b"}, {"name": "lc.other", "key": "o1", "queue": "lc_b"}]') $$,
  'two jobs of a limited name, one of another');
select results_eq($$ select lc.claim('lc_b', 10) $$, $$ values ('b1'), ('o1') $$,
                  'a name limit leaves other names alone');
set local jobs.fake_now = '2030-01-01 00:00:31+00';  -- b1's 30 s lease lapsed
select results_eq($$ select lc.claim('lc_b', 10) $$, $$ values ('b1'), ('o1') $$,
                  'recovery frees the lapsed run''s slot, and the recovered job, first in line, takes it again');
select results_eq($$ select * from lc.state('b1') $$, $$ values ('running', 2, null::text) $$,
                  'its lapsed attempt counted');
select results_eq($$ select * from lc.state('b2') $$, $$ values ('ready', 0, 'n|') $$,
                  'the job behind it still waits on the slot');

-- ---------------------------------------------------------------- per tenant, per key
select ok(jobs.limit_put('t', '{"scope": "tenant", "concurrency": 1}'), 'setup: limit t');
select ok(jobs.limit_put('k', '{"scope": "key", "target": "lc.k", "key": "customer", "concurrency": 1}'), 'setup: limit k');
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "lc.t", "key": "t1", "queue": "lc_t", "tenant": "acme"},
  {"name": "lc.t", "key": "t2", "queue": "lc_t", "tenant": "acme"},
  {"name": "lc.t", "key": "t3", "queue": "lc_t", "tenant": "zeta"},
  {"name": "lc.k", "key": "k1", "queue": "lc_t", "payload": {"customer": 7}},
  {"name": "lc.k", "key": "k2", "queue": "lc_t", "payload": {"customer": 7}},
  {"name": "lc.k", "key": "k3", "queue": "lc_t", "payload": {"customer": 8}}]') $$, 'tenant and keyed jobs');
select results_eq($$ select lc.claim('lc_t', 10) $$, $$ values ('k1'), ('k3'), ('t1'), ('t3') $$,
                  'one per tenant, one per customer');
select results_eq($$ select key, blocked_on from jobs.job where queue = 'lc_t' and state = 'ready' order by key $$,
                  $$ values ('k2', 'k|7'), ('t2', 't|acme') $$, 'each waits on its own group');

-- ---------------------------------------------------------------- when_busy = fail
select ok(jobs.limit_put('f', '{"scope": "key", "target": "lc.f", "key": "account", "concurrency": 1, "when_busy": "fail"}'), 'setup: limit f');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "lc.f", "key": "f1", "queue": "lc_f", "payload": {"account": "x"}},
  {"name": "lc.f", "key": "f2", "queue": "lc_f", "payload": {"account": "x"}, "priority": 5}]') $$, 'two jobs of one account');
select results_eq($$ select lc.claim('lc_f', 1) $$, $$ values ('f1') $$, 'the first runs');
set local jobs.fake_now = '2030-01-01 00:00:40+00';  -- f1's lease (to 01:01) is live
select is((select count(*)::int from jobs.claim('{lc_f}', 'w', 10, 30)), 0, 'the second is not claimed');
select results_eq($$ select state::text, last_error->>'kind', last_error->>'sqlstate', attempt from jobs.job where key = 'f2' $$,
                  $$ values ('failed', 'key_busy', 'SJ012', 0) $$,
                  'it fails for good on the evidence of a live lease, as key_busy (SJ012)');
select lives_ok($$ select * from jobs.enqueue('lc.f', 'f3', '{"account": "x"}', '{"queue": "lc_f"}') $$, 'a third');
set local jobs.fake_now = '2030-01-01 00:01:20+00';  -- f1's lease lapsed, not yet recovered
select is((select count(*)::int from jobs.claim('{lc_f}', 'w', 10, 30, '{"recover": false}')), 0,
          'a lapsed lease is no evidence: the third is not claimed but not failed either');
select results_eq($$ select state::text, blocked_on from jobs.job where key = 'f3' $$,
                  $$ values ('ready', 'f|x') $$, 'it waits for the key');

select * from finish();
rollback;
