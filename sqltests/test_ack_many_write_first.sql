-- jobs.ack_many writes first (sql/40_settle.sql, jobs.ack_batch): each call is one try
-- in a subtransaction, counted against the transaction's budget
-- (jobs.subtransaction_allowed); past it, and for a one-job jobs.ack, the lock pass runs
-- first. Every way answers and writes the same. (A busy row, which makes the try fail,
-- takes two sessions: tests/test_busy_rows_and_recovery.py.)
begin;
select plan(14);

set local jobs.notify = off;
set local track_functions = 'all';  -- the lock pass's calls, counted in this transaction
create function pg_temp.lock_passes() returns bigint language sql as $$
  select coalesce(pg_stat_get_xact_function_calls('jobs.lock_batch(bigint[],bigint[],boolean)'::regprocedure), 0)
$$;
do $$ begin
  perform jobs.enqueue('wf.job', k, '{}', '{"queue": "q_wf"}') from unnest(array['a', 'b', 'c', 'd']) k;
  perform jobs.claim('{q_wf}', 'w', 4, 30);
end $$;
create temp table t on commit drop as
  select j.key, j.id, j.claim from jobs.job j where j.queue = 'q_wf';

select is((select array_agg(a.ok) from jobs.ack_many((select array_agg(id) from t where key = 'a'),
                                                     (select array_agg(claim) from t where key = 'a')) a),
          array[true], 'ack_many: acked');
select is(current_setting('jobs.subtransactions'), '1', '... in one try of the budget');
select is(pg_temp.lock_passes(), 0::bigint, '... without a lock pass');
select is((select array_agg(a.ok) from jobs.ack_many((select array_agg(id) from t where key = 'a'),
                                                     (select array_agg(claim) from t where key = 'a')) a),
          array[false], 'an ack that writes nothing (the fence) answers false');
select is(pg_temp.lock_passes(), 0::bigint, '... in its one try, without a lock pass either');
set local jobs.subtransactions = '8';
select is((select array_agg(a.ok order by a.id)
             from jobs.ack_many((select array_agg(id order by id) from t where key in ('b', 'c')),
                                (select array_agg(claim order by id) from t where key in ('b', 'c'))) a),
          array[true, true], 'past the budget: acked by the lock pass''s way');
select is(current_setting('jobs.subtransactions'), '8', '... which counts no try');
select is(pg_temp.lock_passes(), 1::bigint, '... and locks its rows in a pass first');
select is((select array_agg(a.ok) from jobs.ack_many((select array_agg(id) from t where key = 'b'),
                                                     (select array_agg(claim) from t where key = 'b')) a),
          array[false], 'a job already acked answers false (the fence), either way');
select lives_ok($$ select jobs.ack((select id from t where key = 'd'), (select claim from t where key = 'd')) $$,
                'jobs.ack waits for its row instead');
select is((select array_agg(j.state::text order by j.key) from jobs.job j where j.queue = 'q_wf'),
          array['succeeded', 'succeeded', 'succeeded', 'succeeded'], 'every job succeeded once');


-- the least role that settles takes the same way; the write's helpers are nobody's
do $$ begin
  perform jobs.enqueue('wf.job', 'e', '{}', '{"queue": "q_wf"}');
  perform jobs.claim('{q_wf}', 'w', 1, 30);
end $$;
insert into t select j.key, j.id, j.claim from jobs.job j where j.key = 'e' and j.queue = 'q_wf';
set local jobs.subtransactions = '0';
grant select on t to public;  -- (the test's own table, read as the worker)
set local role sqljobs_worker;
select is((select array_agg(a.ok) from jobs.ack_many((select array_agg(id) from t where key = 'e'),
                                                     (select array_agg(claim) from t where key = 'e')) a),
          array[true], 'a worker''s ack_many writes first too');
select throws_ok($$ select jobs.ack_rows('{1}', '{1}', null, null, now()) $$, '42501', null,
                 'a worker may not call jobs.ack_rows');
select throws_ok($$ select jobs.subtransaction_allowed() $$, '42501', null,
                 '... nor jobs.subtransaction_allowed');
reset role;

select * from finish();
rollback;
