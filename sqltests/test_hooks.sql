-- Settlement hooks (sql/42_hooks.sql): a job with hooks stages its follow-up job in the
-- statement that settles it: by ack, nack to dead or failed, cancel, and the claim's
-- burial of a lapsed lease on the final attempt. One per settlement; a fenced (stale)
-- settle stages nothing; a requeued job settled again stages a new one. Bad hooks are
-- refused before any write.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;

create function pg_temp.hooked(p_key text, p_max integer default 3) returns bigint language sql as $$
  select e.id from jobs.enqueue('hk.job', p_key, '{}', pg_catalog.jsonb_build_object(
    'queue', 'hk', 'max_attempts', p_max, 'tenant', 'acme', 'hooks',
    '{"settled": {"name": "hk.settled", "queue": "hk_after"}, "exhausted": {"name": "hk.exhausted"}}'::jsonb)) e
$$;
-- (PL/pgSQL on custom plans: distributed on Citus, a statement over the jobs with a
-- parameter needs its value to be planned)
create function pg_temp.staged(p_id bigint) returns text[] language plpgsql
set plan_cache_mode = force_custom_plan as $$
begin
  return (select coalesce(pg_catalog.array_agg(j.name || '/' || (j.payload->>'state')
                                               order by j.name), '{}')
            from jobs.job j where j.key like p_id || ':%');
end $$;

-- ack
do $$ declare v bigint := pg_temp.hooked('a'); c bigint; begin
  select cl.claim into c from jobs.claim('{hk}', 'w', 1, 30) cl;
  perform jobs.ack(v, c, '{"ok": 1}');
  perform pg_catalog.set_config('t.a', v::text, true);
  perform pg_catalog.set_config('t.ac', c::text, true);
end $$;
select is(pg_temp.staged(current_setting('t.a')::bigint), '{hk.settled/succeeded}',
          'an ack stages the settled hook (not exhausted)');
select results_eq($$ select queue, tenant, payload->>'error', (payload->>'job_id')::bigint from jobs.job
                      where key like (select current_setting('t.a')) || ':settled:%' $$,
                  $$ values ('hk_after', 'acme', null::text, current_setting('t.a')::bigint) $$,
                  'in its declared queue, the job''s tenant, with the job''s id and no error');
select is((select ok from jobs.ack_many(array[current_setting('t.a')::bigint],
                                        array[current_setting('t.ac')::bigint])), false,
          'a stale ack again is fenced');
select is(pg_catalog.cardinality(pg_temp.staged(current_setting('t.a')::bigint)), 1,
          'and stages nothing twice');

-- nack to dead on the final attempt: settled and exhausted
do $$ declare v bigint := pg_temp.hooked('d', 1); c bigint; begin
  select cl.claim into c from jobs.claim('{hk}', 'w', 1, 30) cl;
  perform jobs.nack(v, c, '{"message": "boom"}');
  perform pg_catalog.set_config('t.d', v::text, true);
end $$;
select is(pg_temp.staged(current_setting('t.d')::bigint), '{hk.exhausted/dead,hk.settled/dead}',
          'a nack that buries the job stages settled and exhausted');
select is((select payload->'error'->>'message' from jobs.job
            where key like (select current_setting('t.d')) || ':exhausted:%'), 'boom',
          'the hook carries the last error');

-- nack fail (terminal) with attempts left: settled only
do $$ declare v bigint := pg_temp.hooked('f', 3); c bigint; begin
  select cl.claim into c from jobs.claim('{hk}', 'w', 1, 30) cl;
  perform jobs.nack(v, c, '{"message": "refused"}', 'fail');
  perform pg_catalog.set_config('t.f', v::text, true);
end $$;
select is(pg_temp.staged(current_setting('t.f')::bigint), '{hk.settled/failed}',
          'a terminal failure with attempts left is settled, not exhausted');

-- a retry is no settlement
do $$ declare v bigint := pg_temp.hooked('r', 3); c bigint; begin
  select cl.claim into c from jobs.claim('{hk}', 'w', 1, 30) cl;
  perform jobs.nack(v, c, '{"message": "again"}', 'retry', 3600);
  perform pg_catalog.set_config('t.r', v::text, true);
end $$;
select is(pg_temp.staged(current_setting('t.r')::bigint), '{}', 'a retry stages nothing');

-- cancel
do $$ declare v bigint := pg_temp.hooked('c'); begin
  perform jobs.cancel(v);
  perform pg_catalog.set_config('t.c', v::text, true);
end $$;
select is(pg_temp.staged(current_setting('t.c')::bigint), '{hk.settled/cancelled}',
          'a cancel stages the settled hook');

-- the claim buries a lapsed lease on the final attempt: no worker is present
do $$ declare v bigint := pg_temp.hooked('l', 1); begin
  perform from jobs.claim('{hk}', 'w', 1, 5);
  perform pg_catalog.set_config('t.l', v::text, true);
end $$;
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select is(jobs.recover('{hk}'), 1, 'recovery buries the lapsed job');
select is(pg_temp.staged(current_setting('t.l')::bigint), '{hk.exhausted/dead,hk.settled/dead}',
          'and its hooks are staged');

-- requeued and settled again: a new hook
do $$ declare c bigint; begin
  perform jobs.requeue(array[current_setting('t.d')::bigint]);
  select cl.claim into c from jobs.claim('{hk}', 'w', 1, 30) cl where cl.id = current_setting('t.d')::bigint;
  perform jobs.ack(current_setting('t.d')::bigint, c);
end $$;
select is(pg_catalog.cardinality(pg_temp.staged(current_setting('t.d')::bigint)), 3,
          'a requeued job settled again stages its settled hook again');

-- refusals, nothing written
select throws_ok($$ select jobs.enqueue('hk.job', 'bad1', '{}', '{"hooks": {"settled": "hk.x"}}') $$,
                 'SJ001', null, 'a hook that is not an object is refused');
select throws_ok($$ select jobs.enqueue('hk.job', 'bad2', '{}', '{"hooks": {"done": {"name": "x"}}}') $$,
                 'SJ001', null, 'an unknown hook kind is refused');

select * from finish();
rollback;
