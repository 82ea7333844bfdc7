-- Rate limits in jobs.claim: at most n starts of a group in any window of per_s
-- seconds. A job the window has no room for is deferred to when it may start (run_at,
-- deferred_by), not counted as an attempt, and not read again before then.
begin;
select plan(13);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema lr;
create function lr.claim(p_n int) returns setof text language sql as $$
  select c.key from jobs.claim(array['lr_q'], 'w', p_n, 30) c order by c.key $$;

select ok(jobs.limit_put('r', '{"scope": "key", "target": "lr.job", "key": "site", "rate": {"n": 2, "per_s": 10}}'),
          'setup: two starts per 10 s per site');
select lives_ok($$ select * from jobs.enqueue_many((select jsonb_agg(jsonb_build_object(
  'name', 'lr.job', 'key', 'a' || i, 'queue', 'lr_q', 'payload', jsonb_build_object('site', 'a')))
  from generate_series(1, 5) i) || '[{"name": "lr.job", "key": "b1", "queue": "lr_q", "payload": {"site": "b"}}]') $$,
  'five jobs of site a, one of site b');
select results_eq($$ select lr.claim(10) $$, $$ values ('a1'), ('a2'), ('b1') $$,
                  'two of a start, and b has a window of its own');
select results_eq($$ select key, run_at, deferred_by, attempt from jobs.job where state = 'ready' order by key $$,
                  $$ values ('a3', '2030-01-01 00:00:10+00'::timestamptz, 'r|a', 0),
                            ('a4', '2030-01-01 00:00:10+00'::timestamptz, 'r|a', 0),
                            ('a5', '2030-01-01 00:00:20+00'::timestamptz, 'r|a', 0) $$,
                  'the rest are deferred to when the window lets each start; no attempt counted');
select results_eq($$ select grp, rate_n, recent_starts, deferred from jobs.limit_stats() where grp = 'r|a' $$,
                  $$ values ('r|a', 2, 2, 3::bigint) $$, 'limit_stats shows the window full and three deferred');
select results_eq($$ select limited from jobs.queue_stats_v2() where queue = 'lr_q' $$,
                  $$ values (3::bigint) $$, 'queue_stats counts them as limited');
set local jobs.fake_now = '2030-01-01 00:00:09+00';
select is((select count(*)::int from jobs.claim('{lr_q}', 'w', 10, 30)), 0, 'not before their time');
set local jobs.fake_now = '2030-01-01 00:00:10+00';
select results_eq($$ select lr.claim(10) $$, $$ values ('a3'), ('a4') $$, 'at 10 s two more start');
select results_eq($$ select attempt from jobs.job where key = 'a3' $$, $$ values (1) $$, 'on their first attempt');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
-- (the job read first: distributed on Citus, a function per row of a query over the jobs
-- would run on a shard)
select lives_ok($$ with j as materialized (select * from jobs.job where key = 'a5')
                    select jobs.promote(id) from j $$, 'an operator promotes a5 to now');
select is((select count(*)::int from jobs.claim('{lr_q}', 'w', 10, 30)), 0,
          'the window (a3, a4 at 10 s) still has no room at 15 s');
select is((select run_at from jobs.job where key = 'a5'), '2030-01-01 00:00:20+00'::timestamptz,
          'a5 is deferred again, to 20 s');
set local jobs.fake_now = '2030-01-01 00:00:20+00';
select results_eq($$ select lr.claim(10) $$, $$ values ('a5') $$, 'and starts then');

select * from finish();
rollback;
