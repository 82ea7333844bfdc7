-- Debounce, singleton and throttle at enqueue, per group (name, tenant, group_key):
--   debounce_s  enqueues of a group within the window collapse into the one waiting
--               job: it takes the latest payload and starts debounce_s after the last
--               (outcome 'debounced'); once it starts, the next enqueue makes a new job;
--   singleton   at most one live job per group: another enqueue answers it ('deduped');
--   throttle    at most throttle_n starts of the group per throttle_per_s seconds (the
--               claim defers the rest, like a rate limit).
-- Each acts on its group, not on the idempotency key, which still dedupes as ever.
begin;
select plan(24);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema ef;
create function ef.enq(p_key text, p_payload jsonb, p_options jsonb) returns text language sql as $$
  select e.outcome || ':' || e.id from jobs.enqueue('ef.job', p_key, p_payload, p_options) e $$;

-- ---------------------------------------------------------------- debounce
select is((select outcome from jobs.enqueue('ef.job', 'd1', '{"v": 1}', '{"debounce_s": 5, "group_key": "doc-9", "queue": "ef"}')),
          'created', 'the first enqueue of a group makes the job');
set local jobs.fake_now = '2030-01-01 00:00:03+00';
select is((select outcome from jobs.enqueue('ef.job', 'd2', '{"v": 2}', '{"debounce_s": 5, "group_key": "doc-9", "queue": "ef"}')),
          'debounced', 'a second inside the window collapses into it');
select results_eq($$ select count(*)::int, min(payload->>'v'), min(run_at) from jobs.job where group_key = 'doc-9' $$,
                  $$ values (1, '2', '2030-01-01 00:00:08+00'::timestamptz) $$,
                  'one job, the latest payload, starting 5 s after the last enqueue');
select is((select outcome from jobs.enqueue('ef.job', 'd3', '{"v": 3}', '{"debounce_s": 5, "group_key": "doc-1", "queue": "ef"}')),
          'created', 'another group is another job');
select is((select outcome from jobs.enqueue('ef.job', 'd1', '{"v": 4}', '{"debounce_s": 5, "group_key": "doc-9", "queue": "ef"}')),
          'debounced', 'a repeated key inside the window is debounced too');
set local jobs.fake_now = '2030-01-01 00:00:10+00';
select is((select count(*)::int from jobs.claim('{ef}', 'w', 10, 30)), 2, 'both start when due');
select is((select outcome from jobs.enqueue('ef.job', 'd4', '{"v": 5}', '{"debounce_s": 5, "group_key": "doc-9", "queue": "ef"}')),
          'created', 'once the debounced job started, the next enqueue makes a new one');
select results_eq($$ select outcome from jobs.enqueue_many('[
    {"name": "ef.job", "key": "d5", "debounce_s": 5, "group_key": "doc-9", "queue": "ef"},
    {"name": "ef.job", "key": "d6", "debounce_s": 5, "group_key": "doc-7", "queue": "ef"},
    {"name": "ef.job", "key": "d7", "debounce_s": 5, "group_key": "doc-7", "queue": "ef"}]') order by ord $$,
  $$ values ('debounced'), ('created'), ('debounced') $$, 'a batch debounces spec by spec, in order');

-- ---------------------------------------------------------------- singleton
select is((select outcome from jobs.enqueue('ef.job', 's1', '{}', '{"singleton": true, "group_key": "report", "queue": "ef_s"}')),
          'created', 'a singleton job');
select is((select id from jobs.enqueue('ef.job', 's2', '{}', '{"singleton": true, "group_key": "report", "queue": "ef_s"}')),
          (select id from jobs.job where key = 's1'), 'another of its group answers the live one');
select is((select outcome from jobs.enqueue('ef.job', 's3', '{}', '{"singleton": true, "group_key": "report", "queue": "ef_s"}')),
          'deduped', 'as deduped');
select is((select outcome from jobs.enqueue('ef.job', 's4', '{}', '{"singleton": true, "group_key": "report", "tenant": "acme", "queue": "ef_s"}')),
          'created', 'another tenant is another group');
select is((select outcome from jobs.enqueue('ef.job', 's5', '{}', '{"group_key": "report", "queue": "ef_s"}')),
          'created', 'a job that is not a singleton is not held back');
select is((select count(*)::int from jobs.claim('{ef_s}', 'w', 10, 30)), 3, 'setup: all run');
select is((select outcome from jobs.enqueue('ef.job', 's6', '{}', '{"singleton": true, "group_key": "report", "queue": "ef_s"}')),
          'deduped', 'a running singleton is live: still deduped');
select lives_ok($$ select jobs.ack(id, claim) from jobs.job where key = 's1' $$, 'it finishes');
select is((select outcome from jobs.enqueue('ef.job', 's7', '{}', '{"singleton": true, "group_key": "report", "queue": "ef_s"}')),
          'created', 'then a new singleton may start');

-- ---------------------------------------------------------------- throttle
select lives_ok($$ select * from jobs.enqueue_many((select jsonb_agg(jsonb_build_object(
  'name', 'ef.t', 'key', 't' || i, 'queue', 'ef_t', 'throttle_n', 1, 'throttle_per_s', 60))
  from generate_series(1, 3) i)) $$, 'three throttled jobs, one start a minute');
select is((select count(*)::int from jobs.claim('{ef_t}', 'w', 10, 30)), 1, 'one starts');
select is((select pg_catalog.array_agg(run_at order by key) from jobs.job where name = 'ef.t' and state = 'ready'),
          array['2030-01-01 00:01:10+00', '2030-01-01 00:02:10+00']::timestamptz[],
          'the others are deferred a minute apart');

-- ---------------------------------------------------------------- refusals
select throws_ok($$ select * from jobs.enqueue('ef.job', 'x', '{}', '{"debounce_s": 0}') $$, 'SJ001',
  'sqljobs.invalid_argument: spec 1: debounce_s must be positive', 'a debounce of zero');
select throws_ok($$ select * from jobs.enqueue('ef.job', 'x', '{}', '{"debounce_s": 5, "delay_s": 1}') $$, 'SJ001',
  'sqljobs.invalid_argument: spec 1: give debounce_s, or run_at / delay_s, not both', 'a debounce and a delay');
select throws_ok($$ select * from jobs.enqueue('ef.job', 'x', '{}', '{"throttle_n": 2}') $$, 'SJ001',
  'sqljobs.invalid_argument: spec 1: give throttle_n and throttle_per_s together', 'half a throttle');
select throws_ok($$ select * from jobs.enqueue('ef.job', 'x', '{}', '{"throttle_n": 2, "throttle_per_s": 0}') $$, 'SJ001',
  'sqljobs.invalid_argument: spec 1: throttle_per_s must be positive', 'a throttle interval of zero');

select * from finish();
rollback;
