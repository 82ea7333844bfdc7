-- Settle keys (sql/40_settle.sql "Busy rows"), one per job and claim: jobs.settle_hold
-- holds, until the transaction ends, the existing settle keys of jobs still running
-- under the claims given, and answers their ids; nothing else (a stale claim, a
-- finished job, a job with no key; an id named twice is answered once). It makes no
-- key. jobs.settle_waiting is false for a job with no key, and for a key only this
-- transaction holds. jobs.purge keeps the settle key of a job that still runs under its
-- claim, however old. (A key held
-- by another session, which lease recovery honours, takes two sessions:
-- tests/test_busy_rows_and_recovery.py.)
begin;
select plan(9);

set local jobs.notify = off;
do $$ begin
  perform jobs.enqueue('sk.job', k, '{}', '{"queue": "q_sk"}') from unnest(array['a', 'b', 'c']) k;
  perform jobs.claim('{q_sk}', 'w', 3, 30);
  perform pg_catalog.set_config('t.ids', (select array_agg(j.id order by j.key) from jobs.job j where j.queue = 'q_sk')::text, true);
  perform pg_catalog.set_config('t.claims', (select array_agg(j.claim order by j.key) from jobs.job j where j.queue = 'q_sk')::text, true);
end $$;
create temp table t (id bigint, claim bigint) on commit drop;
insert into t select * from unnest(current_setting('t.ids')::bigint[], current_setting('t.claims')::bigint[]);
-- what a busy answer makes: the keys of a and b (c has none)
insert into jobs.lock_key (key, created_at)
select jobs.settle_key(t.id, t.claim), now() from t order by t.id limit 2;
select jobs.ack(b.id, b.claim) from (select * from t order by t.id offset 1 limit 1) b;

select is(jobs.settle_hold((select array_agg(id order by id) from t) || (select min(id) from t),
                           (select array_agg(claim order by id) from t) || (select claim from t order by id limit 1)),
          array[(select min(id) from t)],
          'settle_hold: only the running job with a key, under its claim, once (b finished, c has no key)');
select is(jobs.settle_hold(array[(select min(id) from t)], array[(select claim + 1 from t order by id limit 1)]),
          '{}'::bigint[], 'settle_hold: nothing under a stale claim');
select is((select count(*)::int from jobs.lock_key k where k.key like 'settle|%'), 2,
          'settle_hold makes no key');
select is(jobs.settle_waiting((select min(id) from t), (select claim from t order by id limit 1)), false,
          'settle_waiting: false for a key only this transaction holds');
select is(jobs.settle_waiting((select max(id) from t), (select claim from t order by id desc limit 1)), false,
          'settle_waiting: false for a job with no key');
select throws_ok($$ select jobs.settle_hold(null, array[1]::bigint[]) $$, 'SJ001', null,
                 'settle_hold: null ids refused');
select throws_ok($$ select jobs.settle_hold(array[1, 2]::bigint[], array[1]::bigint[]) $$, 'SJ001', null,
                 'settle_hold: arrays of different lengths refused');
select is(jobs.recover('{q_sk}'), 0, 'nothing lapsed: recovery moves nothing');
update jobs.lock_key set created_at = now() - interval '2 days' where key like 'settle|%';
do $$ begin perform jobs.purge(); end $$;
select is((select array_agg(k.key) from jobs.lock_key k where k.key like 'settle|%'),
          array[jobs.settle_key((select min(id) from t), (select claim from t order by id limit 1))],
          'purge sweeps a day-old settle key, but not that of a job still running under its claim');

select * from finish();
rollback;
