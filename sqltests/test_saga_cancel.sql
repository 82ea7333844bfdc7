-- Cancelling a compensable job unwinds it: the cancel leaves it ready and compensating
-- (with an unwind record that settles it cancelled); a job without compensable steps is
-- cancelled at once; a cancel during an unwind changes nothing.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "saga.job", "key": "a", "queue": "q_sc"},
                                                    {"name": "saga.job", "key": "b", "queue": "q_sc"}]') $$, 'setup: two jobs');
create temp table c1 as select id, key, claim from jobs.claim('{q_sc}', 'w', 2, 30);
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L, null, %L)', (select id from c1 where key = 'a'),
                       (select claim from c1 where key = 'a'), 'book', '1', '{"compensable": true}'), 'a: a compensable step');
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1 where key = 'b'),
                       (select claim from c1 where key = 'b'), 'plain', '1'), 'b: a plain step');

select lives_ok(format('select jobs.cancel(%s); select jobs.cancel(%s)', (select id from c1 where key = 'a'),
                       (select id from c1 where key = 'b')), 'cancel both while running');
select results_eq($$ select key, state, compensating from jobs.job order by key $$,
                  $$ values ('a', 'ready'::jobs.job_state, true), ('b', 'cancelled'::jobs.job_state, false) $$,
                  'the compensable one waits to unwind, the other is cancelled');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1 where key = 'a'),
                        (select claim from c1 where key = 'a'), 'more', '1'), 'SJ004', null,
                 'the cancelled run writes nothing more');
create temp table c2 as select id, claim from jobs.claim('{q_sc}', 'w', 1, 30);
select lives_ok(format('select jobs.cancel(%s)', (select id from c2)), 'a second cancel, mid-unwind');
select is(jobs.step_unwound((select id from c2), (select claim from c2)), 'cancelled'::jobs.job_state,
          'changed nothing: the unwind settles it cancelled');
select is((select last_error->>'kind' from jobs.job where id = (select id from c2)), 'cancelled',
          'with a cancelled error');

select * from finish();
rollback;
