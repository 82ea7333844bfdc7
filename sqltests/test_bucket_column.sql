-- The bucket column (sql/00_schema.sql; docs/design/citus.md): every insert into
-- jobs.job, step, event_wait and slot writes bucket = the job's id & 255, so a
-- distributed install can be distributed by it (Citus refuses a generated column).
-- Each path that inserts is taken here, as the least role that takes it, and its rows
-- checked: the single, batch-of-specs and batch-of-keys enqueues, the relay, a claim
-- under a limit (slots), step_put, step_sleep, step_invoke (children and their
-- outcomes), step_wait (the wait, an event step, a timeout step), the unwind record,
-- and a fork's copied steps. No caller may set the bucket: it is no spec field.
begin;
select plan(19);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;

-- rows of the four tables whose bucket is not their job's id & 255, by table
create function pg_temp.wrong() returns table (tbl text, n bigint)
language sql as $$
  select 'job', count(*) from jobs.job where bucket is distinct from (id & 255)
  union all select 'step', count(*) from jobs.step where bucket is distinct from (job_id & 255)
  union all select 'event_wait', count(*) from jobs.event_wait
                                where bucket is distinct from (job_id & 255)
  union all select 'slot', count(*) from jobs.slot where bucket is distinct from (job_id & 255)
$$;
create function pg_temp.none_wrong() returns boolean
language sql as $$ select sum(n) = 0 from pg_temp.wrong() $$;

select lives_ok($$ select jobs.limit_put('bk_key', '{"scope": "key", "target": "bk.limited", "key": "k", "concurrency": 2}') $$,
                'setup: a key limit, so a claim writes slots');

set local role sqljobs_producer;
select lives_ok($$ select jobs.enqueue('bk.one', 'o1', '{}', '{"queue": "bk", "tenant": "acme"}') $$,
                'a producer''s single enqueue');
select lives_ok($$ select jobs.enqueue_many('[{"name": "bk.many", "key": "m1", "queue": "bk"},
                                              {"name": "bk.many", "key": "m2", "queue": "bk", "tenant": "t2"}]') $$,
                'a batch of specs');
select lives_ok($$ select jobs.enqueue_batch('{"name": "bk.keys", "queue": "bk"}', array['b1', 'b2', 'b3']) $$,
                'a batch of keys under one spec');
select lives_ok($$ select jobs.enqueue('bk.limited', 'l1', '{}', '{"queue": "bk_lim"}') $$,
                'a job under the key limit');
select lives_ok($$ select jobs.stage('bk.staged', 's1', '{}', '{"queue": "bk"}') $$, 'a staged job');
select throws_ok($$ select jobs.enqueue('bk.one', 'x', '{}', '{"bucket": 3}') $$, 'SJ001',
                 null, 'the bucket is no spec field: a spec that names it is refused');
reset role;
do $$ begin
  perform jobs.relay(10, 'relay-bk', 30);
  perform jobs.relay(0, 'relay-bk', 30);
end $$;
select is((select count(*)::int from jobs.job where queue like 'bk%'), 8, 'eight jobs made');
select ok(pg_temp.none_wrong(), 'each job''s bucket is its id & 255, on every enqueue path and the relay');
select is((select count(*)::int from jobs.job where bucket is null), 0, '... and none is null');

-- claims (a slot), steps, a child and its outcome, waits, an unwind, as a worker
set local role sqljobs_worker;
do $$
declare c record; v_child bigint; v_cc bigint;
begin
  select * into c from jobs.claim('{bk_lim}', 'w', 1, 30);
  perform pg_catalog.set_config('t.limited', c.id::text, true);
  -- step_put, step_sleep (already due: stored, not parked)
  select * into c from jobs.claim('{bk}', 'w', 1, 30, '{"names": ["bk.one"]}');
  perform jobs.step_put(c.id, c.claim, 'charge', '{"ok": 1}', null, '{"compensable": true}');
  perform jobs.step_sleep(c.id, c.claim, 'nap', '2029-01-01');
  -- step_wait: the wait times out at once (a timeout step)
  perform jobs.step_wait(c.id, c.claim, 'late', '[{"event": "bk.never"}]', 0);
  -- a wait that parks (an event_wait row)
  perform jobs.step_wait(c.id, c.claim, 'paid', '[{"event": "bk.paid"}]');
  perform pg_catalog.set_config('t.waiter', c.id::text, true);
  -- step_invoke: a child, settled, whose outcome the parent stores
  select * into c from jobs.claim('{bk}', 'w', 1, 30, '{"names": ["bk.keys"]}');
  perform jobs.step_invoke(c.id, c.claim, '{kid}', '[{"name": "bk.child", "queue": "bk_kid"}]');
  select k.id, k.claim into v_child, v_cc from jobs.claim('{bk_kid}', 'w', 1, 30) k;
  perform jobs.ack(v_child, v_cc);
  select * into c from jobs.claim('{bk}', 'w', 1, 30, '{"names": ["bk.keys"]}');
  perform jobs.step_invoke(c.id, c.claim, '{kid}', '[{"name": "bk.child", "queue": "bk_kid"}]');
  -- a compensable job's last attempt fails: the unwind record
  select * into c from jobs.claim('{bk}', 'w', 1, 30, '{"names": ["bk.many"]}');
  perform jobs.step_put(c.id, c.claim, 'reserve', '1', null, '{"compensable": true}');
  perform jobs.nack(c.id, c.claim, '{"message": "no"}', 'fail');
  perform pg_catalog.set_config('t.unwound', c.id::text, true);
end $$;
reset role;
select is((select count(*)::int from jobs.slot where job_id = current_setting('t.limited')::bigint), 1,
          'the limited claim holds a slot');
select is((select array_agg(kind order by ordinal) from jobs.step
            where job_id = current_setting('t.waiter')::bigint),
          '{run,sleep,timeout}'::text[], 'run, sleep and timeout steps written');
select is((select count(*)::int from jobs.event_wait where job_id = current_setting('t.waiter')::bigint), 1,
          'an open event wait');
select ok(exists (select from jobs.step where kind = 'child'), 'a child''s outcome stored as a step');
select ok(exists (select from jobs.step where job_id = current_setting('t.unwound')::bigint
                                          and kind = 'unwind'), 'an unwind record');
select ok(pg_temp.none_wrong(), 'every slot, step and wait carries its job''s bucket');

-- an event step, and a fork's copied steps (an operator's verb)
do $$ begin perform jobs.emit_event('bk.paid', '{}'); end $$;
do $$
declare c record;
begin
  select * into c from jobs.claim('{bk}', 'w', 1, 30, '{"names": ["bk.one"]}');
  perform jobs.step_wait(c.id, c.claim, 'paid', '[{"event": "bk.paid"}]');
  perform jobs.ack(c.id, c.claim);
end $$;
select is((select kind from jobs.step where job_id = current_setting('t.waiter')::bigint and name = 'paid'),
          'event', 'the woken wait stored an event step');
set local role sqljobs_operator;
select lives_ok($$ select jobs.fork(current_setting('t.waiter')::bigint, 'paid') $$,
                'an operator forks the job');
reset role;
select results_eq($$ select tbl, n from pg_temp.wrong() $$,
                  $$ values ('job', 0::bigint), ('step', 0), ('event_wait', 0), ('slot', 0) $$,
                  'after every path, no row of the four tables lacks its bucket');

select * from finish();
rollback;
