-- The batch settles answer each input under its own claim: a job named twice, under a
-- stale claim and under the live one, is ok only for the live one. And a requeue never
-- makes a second live job of a singleton or debounce group: the one-job form refuses
-- (SJ008), the bulk form leaves it (still matching).
begin;
select plan(7);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;
do $$ declare c1 bigint; c2 bigint; begin
  perform jobs.enqueue('pi.job', 'a', '{}', '{"queue": "q_pi", "max_attempts": 3}');
  select c.claim into c1 from jobs.claim('{q_pi}', 'w', 1, 5) c;
  perform pg_catalog.set_config('jobs.fake_now', '2030-01-01 00:00:10+00', true);
  select c.claim into c2 from jobs.claim('{q_pi}', 'w', 1, 30) c;  -- recovered, claimed again
  perform pg_catalog.set_config('t.c1', c1::text, true);
  perform pg_catalog.set_config('t.c2', c2::text, true);
  perform pg_catalog.set_config('t.id', (select id from jobs.job where key = 'a')::text, true);
end $$;

select results_eq($$ select ok from jobs.heartbeat_many(
                       array[current_setting('t.id')::bigint, current_setting('t.id')::bigint],
                       array[current_setting('t.c1')::bigint, current_setting('t.c2')::bigint], 30) $$,
                  $$ values (false), (true) $$, 'heartbeat_many: the stale claim false, the live one true');
select results_eq($$ select ok from jobs.nack_many(
                       array[current_setting('t.id')::bigint, current_setting('t.id')::bigint],
                       array[current_setting('t.c1')::bigint, current_setting('t.c2')::bigint],
                       null, array['park', 'park']) $$,
                  $$ values (false), (true) $$, 'nack_many: per input too');
do $$ declare c bigint; begin
  perform jobs.promote(current_setting('t.id')::bigint);
  select cl.claim into c from jobs.claim('{q_pi}', 'w', 1, 30) cl;
  perform pg_catalog.set_config('t.c3', c::text, true);
end $$;
select results_eq($$ select ok from jobs.ack_many(
                       array[current_setting('t.id')::bigint, current_setting('t.id')::bigint],
                       array[current_setting('t.c2')::bigint, current_setting('t.c3')::bigint]) $$,
                  $$ values (false), (true) $$, 'ack_many: per input too');

-- requeue into a taken singleton group
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
do $$ declare c bigint; begin
  perform jobs.enqueue('pi.single', 's1', '{}', '{"queue": "q_pi1", "singleton": true}');
  select cl.claim into c from jobs.claim('{q_pi1}', 'w', 1, 30) cl;
  perform jobs.nack(x.id, x.claim, null, 'fail')
     from (with x as materialized (select j.id, j.claim from jobs.job j where j.key = 's1')
           select * from x) x;
  perform jobs.enqueue('pi.single', 's2', '{}', '{"queue": "q_pi1", "singleton": true}');
  perform pg_catalog.set_config('t.s1', (select id from jobs.job where key = 's1')::text, true);
end $$;
select throws_ok($$ select jobs.requeue(array[current_setting('t.s1')::bigint]) $$,
                 'SJ008', null, 'a requeue into a singleton group with a live job is refused');
select results_eq($$ select moved, remaining from jobs.requeue_where('{"name": "pi.single"}') $$,
                  $$ values (0, 1::bigint) $$, 'requeue_where leaves it, still matching');
select is((select state::text from jobs.job where key = 's1'), 'failed', 'the job is left as it was');
select is((select count(*)::int from jobs.job where name = 'pi.single' and state = 'ready'), 1,
          'one live job in the group');

select * from finish();
rollback;
