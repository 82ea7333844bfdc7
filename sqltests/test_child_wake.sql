-- A child's final settlement by any path wakes its parked parent: an operator's cancel,
-- lease recovery burying it, its removal. A job without a parent wakes nobody, and a
-- child that is only retried (not final) leaves the parent parked.
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('parent.job', 'p', '{}', '{"queue": "q_pw"}') $$, 'setup: a parent');
create temp table c1 as select id, claim from jobs.claim('{q_pw}', 'w', 1, 30);
select results_eq(format($$ select parked from jobs.step_invoke(%s, %s, '{a,b,c}',
    '[{"name": "kid", "queue": "q_kids", "max_attempts": 2},
      {"name": "kid", "queue": "q_kids", "max_attempts": 1},
      {"name": "kid", "queue": "q_kids"}]') $$, (select id from c1), (select claim from c1)),
  $$ values (true), (true), (true) $$, 'setup: the parent awaits three children');

create temp table k as select id, claim, key from jobs.claim('{q_kids}', 'w', 3, 10);
select lives_ok($$ select jobs.nack((select id from k where key like '%:a'), (select claim from k where key like '%:a'), '{"m": 1}', 'retry', 0) $$,
                'child a fails an attempt (it will be retried)');
select is((select state from jobs.job where id = (select id from c1)), 'parked'::jobs.job_state, 'a retry is not final: the parent stays parked');

select lives_ok($$ select jobs.cancel((select id from k where key like '%:a')) $$, 'child a is cancelled');
select is((select state from jobs.job where id = (select id from c1)), 'ready'::jobs.job_state, 'a cancel wakes the parent');

update jobs.job set state = 'parked', run_at = 'infinity' where id = (select id from c1);
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select lives_ok($$ select * from jobs.claim('{q_kids}', 'w', 1, 10) $$,
                'setup: a claim recovers child b''s lapsed lease (its only attempt: dead)');
select results_eq($$ select (select state from jobs.job where key like '%:b'), (select state from jobs.job where id = (select id from c1)) $$,
                  $$ values ('dead'::jobs.job_state, 'ready'::jobs.job_state) $$,
                  'a child buried by lease recovery wakes the parent');

select * from finish();
rollback;
