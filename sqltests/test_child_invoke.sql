-- jobs.step_invoke enqueues a child per step (once: keyed by parent and step), parks
-- the parent until every child settled; a child's final settlement wakes the parent
-- (trigger), and the parent's next call stores each child's outcome as its step.
begin;
select plan(13);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('parent.job', 'p', '{}', '{"queue": "q_fam"}') $$, 'setup: a parent');
create temp table c1 as select id, claim from jobs.claim('{q_fam}', 'w', 1, 30);
create temp table r1 as
  select * from jobs.step_invoke((select id from c1), (select claim from c1), '{a,b}',
    '[{"name": "child.job", "queue": "q_fam", "payload": {"n": 1}},
      {"name": "child.job", "queue": "q_fam", "payload": {"n": 2}}]');
select results_eq($$ select name, value, parked from r1 $$,
                  $$ values ('a', null::jsonb, true), ('b', null::jsonb, true) $$,
                  'both children are live: the parent parks');
select results_eq($$ select state, run_at from jobs.job where id = (select id from c1) $$,
                  $$ values ('parked'::jobs.job_state, 'infinity'::timestamptz) $$, 'with no wake-up time');
select results_eq($$ select key, parent_id = (select id from c1), parent_step from jobs.job where name = 'child.job' order by key $$,
                  format($$ values (%L, true, 'a'), (%L, true, 'b') $$, (select id from c1) || ':a', (select id from c1) || ':b'),
                  'children are keyed by parent and step, and know their parent');

-- the first child succeeds: the parent wakes, calls again, parks again for the second
create temp table k1 as select id, claim, key from jobs.claim('{q_fam}', 'w', 10, 30);
select is((select count(*)::int from k1), 2, 'the two children are claimed (the parked parent is not)');
select lives_ok($$ select jobs.ack((select id from k1 where key like '%:a'), (select claim from k1 where key like '%:a'), '{"ok": 1}') $$,
                'child a succeeds');
select is((select state from jobs.job where id = (select id from c1)), 'ready'::jobs.job_state, 'its settlement wakes the parent');
create temp table c2 as select id, claim from jobs.claim('{q_fam}', 'w', 1, 30);
select results_eq($$ select name, value->>'state', value->'result', parked
                      from jobs.step_invoke((select id from c2), (select claim from c2), '{a,b}',
                        '[{"name": "child.job", "queue": "q_fam", "payload": {"n": 1}},
                          {"name": "child.job", "queue": "q_fam", "payload": {"n": 2}}]') $$,
                  $$ values ('a', 'succeeded', '{"ok": 1}'::jsonb, true), ('b', null, null::jsonb, true) $$,
                  'a replay stores a''s outcome, enqueues nothing new, parks for b');
select is((select count(*)::int from jobs.job where name = 'child.job'), 2, 'still two children');

-- the second child fails for good: the parent wakes and gets both outcomes
select lives_ok($$ select jobs.nack((select id from k1 where key like '%:b'), (select claim from k1 where key like '%:b'), '{"message": "no"}', 'fail') $$,
                'child b fails');
create temp table c3 as select id, claim from jobs.claim('{q_fam}', 'w', 1, 30);
select results_eq($$ select name, value->>'state', value->'error'->>'message', parked
                      from jobs.step_invoke((select id from c3), (select claim from c3), '{a,b}',
                        '[{"name": "child.job", "queue": "q_fam", "payload": {"n": 1}},
                          {"name": "child.job", "queue": "q_fam", "payload": {"n": 2}}]') $$,
                  $$ values ('a', 'succeeded', null, false), ('b', 'failed', 'no', false) $$,
                  'every child settled: both outcomes, no park');
select results_eq($$ select name, kind from jobs.job_steps((select id from c3)) order by name $$,
                  $$ values ('a', 'child'), ('b', 'child') $$, 'stored as child steps');
select throws_ok($$ select * from jobs.step_invoke(1, 1, '{a}', '[]') $$, 'SJ001', null,
                 'names and specs of different lengths are refused');

select * from finish();
rollback;
