-- jobs.fork(id, from_step): a new job whose history is the original's steps before
-- from_step (order and patch markers kept, saga records not), its fields copied (the
-- actor too), the original untouched, the fork recorded; refusals for a missing job or
-- step, a running original, and a singleton group with a live job.
begin;
select plan(17);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;
do $$
declare v_id bigint; v_claim bigint;
begin
  select e.id into v_id from jobs.enqueue('fk.order', 'o-1', '{"order": 7}',
    '{"queue": "fk", "priority": 3, "max_attempts": 4, "tenant": "acme",
      "actor": {"user": "42", "via": "api"}}') e;
  select c.claim into v_claim from jobs.claim('{fk}', 'w1', 1, 30) c;
  perform jobs.step_put(v_id, v_claim, 'reserve', '{"slot": 1}');
  perform jobs.step_put(v_id, v_claim, 'v2', 'true', null, '{"patch": true}');
  perform jobs.step_put(v_id, v_claim, 'charge', '{"paid": 10}');
  perform jobs.step_put(v_id, v_claim, 'ship', '{"track": "x"}');
  perform jobs.step_put(v_id, v_claim, 'charge', '{"refund": 10}', null, '{"undo": true}');
  perform jobs.nack(v_id, v_claim, '{"message": "ship failed"}', 'fail');
  perform pg_catalog.set_config('t.orig', v_id::text, true);
end $$;

select throws_ok($$ select jobs.fork(current_setting('t.orig')::bigint, 'nope') $$,
                 'SJ021', null, 'a step the history does not have is refused');
select throws_ok($$ select jobs.fork(current_setting('t.orig')::bigint, 'sqljobs.patch:v2') $$,
                 'SJ021', null, 'a runtime record is not a step to fork from');
select throws_ok($$ select jobs.fork(-1, 'ship') $$, 'SJ006', null, 'a missing job is refused');
select throws_ok($$ select jobs.fork(current_setting('t.orig')::bigint, '') $$,
                 'SJ001', null, 'an empty step name is refused');

select ok(jobs.fork(current_setting('t.orig')::bigint, 'ship') > 0, 'fork from ship');
-- (the setting read in a scalar subquery: distributed on Citus, a statement over the
-- jobs runs on their shards, where this session's settings are not)
do $$ begin perform pg_catalog.set_config('t.fork',
  (select f.job_id from jobs.job_fork f where f.forked_from = current_setting('t.orig')::bigint)::text, true);
end $$;

select results_eq($$ select name, queue, tenant, payload, priority, max_attempts, state::text, attempt,
                            key like 'o-1:fork:%'
                       from jobs.job where id = (select current_setting('t.fork')::bigint) $$,
                  $$ values ('fk.order', 'fk', 'acme', '{"order": 7}'::jsonb, 3::smallint, 4,
                             'ready', 0, true) $$,
                  'the fork copies name, queue, tenant, payload, priority and policy; ready, attempt 0, a key of its own');
select is((select actor from jobs.job where id = (select current_setting('t.fork')::bigint)),
          '{"user": "42", "via": "api"}'::jsonb, 'the fork copies the actor (who asked for the job)');
select results_eq($$ select name, ordinal, value from jobs.step
                      where job_id = (select current_setting('t.fork')::bigint) order by ordinal $$,
                  $$ values ('reserve', 1, '{"slot": 1}'::jsonb), ('sqljobs.patch:v2', 2, 'true'::jsonb),
                            ('charge', 3, '{"paid": 10}'::jsonb) $$,
                  'its history: the steps before ship, in order, with the patch marker; no undo record');
select is((select step_seq from jobs.job where id = (select current_setting('t.fork')::bigint)), 3,
          'the next step it writes comes after the copied ones');
select ok(not (select compensable from jobs.job where id = (select current_setting('t.fork')::bigint)),
          'a history without compensable steps is not compensable');
select results_eq($$ select forked_from, from_step from jobs.job_forked_from(current_setting('t.fork')::bigint) $$,
                  $$ values (current_setting('t.orig')::bigint, 'ship') $$,
                  'job_forked_from points back to the original and the step');
select is((select count(*)::int from jobs.job_forked_from(current_setting('t.orig')::bigint)), 0,
          'the original is not a fork');
select results_eq($$ select state::text, (select count(*)::int from jobs.step s
                                          where s.job_id = j.id and s.bucket = j.bucket)
                       from jobs.job j where j.id = (select current_setting('t.orig')::bigint) $$,
                  $$ values ('failed', 5) $$, 'the original is left as it was');

-- the fork's first claim replays the copied steps
select is((select c.steps from jobs.claim('{fk}', 'w2', 1, 30) c),
          '{"reserve": {"slot": 1}, "sqljobs.patch:v2": true, "charge": {"paid": 10},
            "sqljobs.order": ["reserve", "sqljobs.patch:v2", "charge"]}'::jsonb,
          'the fork''s claim answers the copied history and its order');
select throws_ok($$ select jobs.fork(current_setting('t.fork')::bigint, 'reserve') $$,
                 'SJ009', null, 'a running job is not forked');

-- a singleton group with a live job
do $$
declare v_id bigint; v_claim bigint;
begin
  select e.id into v_id from jobs.enqueue('fk.single', 's-1', '{}', '{"queue": "fk1", "singleton": true}') e;
  select c.claim into v_claim from jobs.claim('{fk1}', 'w1', 1, 30) c;
  perform jobs.step_put(v_id, v_claim, 'a', '1');
  perform jobs.step_put(v_id, v_claim, 'b', '2');
  perform jobs.nack(v_id, v_claim, null, 'fail');
  perform jobs.enqueue('fk.single', 's-2', '{}', '{"queue": "fk1", "singleton": true}');
  perform pg_catalog.set_config('t.single', v_id::text, true);
end $$;
select throws_ok($$ select jobs.fork(current_setting('t.single')::bigint, 'b') $$,
                 'SJ008', null, 'a singleton whose group has a live job is not forked');

-- operator role only: a worker may not fork
create role fk_worker login;
grant sqljobs_worker to fk_worker;
set local jobs.fake_now = '';
set local session authorization fk_worker;
select throws_ok($$ select jobs.fork(1, 'b') $$, '42501', null, 'a worker role cannot fork');
reset session authorization;

select * from finish();
rollback;
