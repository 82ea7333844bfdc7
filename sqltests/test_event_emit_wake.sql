-- jobs.emit_event wakes, at once, EVERY parked job whose open wait the event matches
-- (name and payload containment); others stay parked. Each woken job's next wait call
-- resolves with the event.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "wait.job", "key": "a", "queue": "q_ev"},
  {"name": "wait.job", "key": "b", "queue": "q_ev"},
  {"name": "wait.job", "key": "c", "queue": "q_ev"}
]') $$, 'setup: three jobs');
create temp table c1 as select id, key, claim from jobs.claim('{q_ev}', 'w', 10, 30);
select results_eq(
  $$ select w.parked from c1 cross join lateral jobs.step_wait(c1.id, c1.claim, 'paid',
       case c1.key when 'c' then '[{"event": "order.paid", "match": {"order": 2}}]'
                   else '[{"event": "order.paid", "match": {"order": 1}}]' end::jsonb) w
      order by c1.key $$,
  $$ values (true), (true), (true) $$, 'setup: all three wait (a, b for order 1; c for order 2)');
select is((select count(*)::int from jobs.event_wait), 3, 'three open waits');

set local jobs.fake_now = '2030-01-01 00:00:05+00';
select isnt(jobs.emit_event('order.paid', '{"order": 1, "amount": 5}'), null, 'emit answers the event id');
select results_eq($$ select key, state from jobs.job order by key $$,
  $$ values ('a', 'ready'::jobs.job_state), ('b', 'ready'::jobs.job_state), ('c', 'parked'::jobs.job_state) $$,
  'every matching waiter is woken; the other stays parked');
select is((select run_at from jobs.job where key = 'a'), '2030-01-01 00:00:05+00'::timestamptz, 'woken to run now');

create temp table c2 as select id, key, claim from jobs.claim('{q_ev}', 'w', 10, 30);
select results_eq(
  $$ select c2.key, w.value->'payload', w.parked from c2
       cross join lateral jobs.step_wait(c2.id, c2.claim, 'paid', '[{"event": "order.paid", "match": {"order": 1}}]') w
      order by c2.key $$,
  $$ values ('a', '{"order": 1, "amount": 5}'::jsonb, false), ('b', '{"order": 1, "amount": 5}'::jsonb, false) $$,
  'both woken jobs resolve with the event (one event, every waiter sees it)');
select is((select count(*)::int from jobs.event_wait), 1, 'resolved waits are removed; c''s stays');
select throws_ok($$ select jobs.emit_event('x', '[1]') $$, 'SJ001', null, 'a payload must be an object');

select * from finish();
rollback;
