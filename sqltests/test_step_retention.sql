-- Steps and open event waits go with their job: removing the job removes them.
begin;
select plan(4);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('ret.job', 'k', '{}', '{"queue": "q_ret"}') $$, 'setup: a job');
create temp table c1 as select id, claim from jobs.claim('{q_ret}', 'w', 1, 30);
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L); select * from jobs.step_wait(%s, %s, %L, %L)',
                       (select id from c1), (select claim from c1), 's', '1',
                       (select id from c1), (select claim from c1), 'w', '[{"event": "e"}]'),
                'setup: a step and a parked wait');
select lives_ok(format('select jobs.remove(%s)', (select id from c1)), 'remove the parked job');
select results_eq($$ select (select count(*) from jobs.step)::int, (select count(*) from jobs.event_wait)::int $$,
                  $$ values (0, 0) $$, 'its steps and waits are gone');

select * from finish();
rollback;
