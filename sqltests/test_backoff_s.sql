-- jobs.backoff_s(attempt, base_s, cap_s, jitter): delay = least(cap, base * 2^(attempt-1));
-- none: delay; full: uniform [0, delay]; equal: delay/2 + uniform [0, delay/2].
begin;
select plan(16);

select results_eq(
  $$ select a, jobs.backoff_s(a, 2, 1000, 'none') from pg_catalog.generate_series(1, 12) a $$,
  $$ select a, least(1000, 2 * 2 ^ (a - 1))::float8 from pg_catalog.generate_series(1, 12) a $$,
  'none: exactly least(cap, base * 2^(attempt - 1)) for attempts 1..12');
select is(jobs.backoff_s(1, 1, 3600, 'none'), 1::float8, 'none, attempt 1: the base');
select is(jobs.backoff_s(4, 0.5, 3600, 'none'), 4::float8, 'none, attempt 4, base 0.5: 4 s');
select is(jobs.backoff_s(30, 1, 3600, 'none'), 3600::float8, 'none, attempt 30: the cap');
select is(jobs.backoff_s(0, 5, 3600, 'none'), 5::float8, 'attempt 0 counts as attempt 1');
select is(jobs.backoff_s(1025, 1, 3600, 'none'), 3600::float8, 'attempt 1025 (2^1024 overflows a double): the cap');
select is(jobs.backoff_s(2000000000, 1e300, 1e300, 'none'), 1e300::float8, 'any attempt, any finite cap: no overflow');
select is(jobs.backoff_s(11, 1, 2048, 'none'), 1024::float8, 'just below the cap: base * 2^(attempt - 1)');
select is(jobs.backoff_s(12, 1, 2048, 'none'), 2048::float8, 'exactly at the cap: the cap');

-- 200 draws per jitter mode; the delay is 80 s (attempt 4, base 10, cap 100)
create temp table draws as
  select m.mode, jobs.backoff_s(4, 10, 100, m.mode) as s
    from (values ('full'), ('equal')) m(mode), pg_catalog.generate_series(1, 200);
select ok((select bool_and(s between 0 and 80) from draws where mode = 'full'),
          'full: 200 draws all within [0, delay]');
select ok((select count(distinct s) > 100 from draws where mode = 'full'), 'full: the draws vary');
select ok((select min(s) < 40 and max(s) > 40 from draws where mode = 'full'),
          'full: the draws spread below and above delay/2');
select ok((select bool_and(s between 40 and 80) from draws where mode = 'equal'),
          'equal: 200 draws all within [delay/2, delay]');
select ok((select count(distinct s) > 100 from draws where mode = 'equal'), 'equal: the draws vary');
select ok((select bool_and(jobs.backoff_s(20, 10, 100, 'full') between 0 and 100)
             from pg_catalog.generate_series(1, 200)),
          'full jitter is applied to the capped delay');

-- a job deep into a long retry budget is still retried, at the cap
set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  perform jobs.enqueue('backoff.job', 'long', '{}',
    '{"queue": "q_backoff", "max_attempts": 100000, "retry_base_s": 1, "retry_cap_s": 600, "retry_jitter": "none"}');
  update jobs.job set attempt = 4999 where name = 'backoff.job';  -- setup: 4,999 attempts spent
  perform from jobs.claim('{q_backoff}', 'w', 1, 30);
end $$;
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
create temp table n as
  with x as materialized (select j.id, j.claim from jobs.job j where j.name = 'backoff.job')
  select jobs.nack(x.id, x.claim, '{"message": "again"}')::text as state from x;
select results_eq(
  $$ select n.state, j.attempt, j.run_at from n, jobs.job j where j.name = 'backoff.job' $$,
  $$ values ('ready', 5000, '2030-01-01 00:10:00+00'::timestamptz) $$,
  'retry after attempt 5000: ready again, run_at = now + the cap');

select * from finish();
rollback;
