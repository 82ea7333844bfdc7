-- jobs.step_put is idempotent: a second put of a stored step answers what is stored
-- (the first write wins), and the next claim hands every stored step back.
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('step.job', 'k1', '{}', '{"queue": "q_step"}') $$,
                'setup: a job');
create temp table c1 as select id, claim, steps from jobs.claim('{q_step}', 'w', 1, 30);
select is((select steps from c1), null, 'a job without steps is claimed with steps = null');

select is(jobs.step_put((select id from c1), (select claim from c1), 'one', '{"v": 1}'),
          '{"v": 1}'::jsonb, 'first put stores');
select is(jobs.step_put((select id from c1), (select claim from c1), 'one', '{"v": 2}'),
          '{"v": 1}'::jsonb, 'a second put of the same step answers the stored value');
select is(jobs.step_put((select id from c1), (select claim from c1), 'two', 'null'),
          'null'::jsonb, 'a JSON null is a value like any other');
select results_eq($$ select name, ordinal < lead(ordinal) over (order by ordinal) from jobs.job_steps((select id from c1)) $$,
                  $$ values ('one', true), ('two', null::boolean) $$,
                  'steps keep the order of their first writing');

-- retry the attempt: the claim hands the steps back
select lives_ok(format('select jobs.nack(%s, %s, null, %L, 0)', (select id from c1),
                       (select claim from c1), 'retry'), 'setup: the attempt fails');
select is((select steps from jobs.claim('{q_step}', 'w', 1, 30)),
          '{"one": {"v": 1}, "two": null, "sqljobs.order": ["one", "two"]}'::jsonb,
          'the next claim answers every stored step, and the order they were written in');

select * from finish();
rollback;
