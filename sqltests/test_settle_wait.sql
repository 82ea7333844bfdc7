-- A batch settle with p_wait (the overloads of jobs.ack_many and jobs.nack_many that
-- take it; sql/40_settle.sql "Busy rows"): the same answers and writes as without it when no row is busy, never
-- ok = null, the fence as always; a null p_wait is false. jobs.settle_waiting, which
-- lease recovery asks, is false for a job with no settle key and for one whose key
-- nobody else holds. (Waiting for another session's row lock, and recovery leaving
-- the job to the waiting settle, take two sessions: tests/test_busy_rows_and_recovery.py.)
begin;
select plan(8);

set local jobs.notify = off;
do $$ begin
  perform jobs.enqueue('sw.job', k, '{}', '{"queue": "q_sw"}') from unnest(array['a', 'b', 'c']) k;
  perform pg_catalog.set_config('t.ids', (select array_agg(c.id order by c.id) from jobs.claim('{q_sw}', 'w', 3, 30) c)::text, true);
  perform pg_catalog.set_config('t.claims', (select array_agg(j.claim order by j.id) from jobs.job j where j.queue = 'q_sw')::text, true);
end $$;

select results_eq($$ select id, ok from jobs.ack_many(
                       array[(current_setting('t.ids')::bigint[])[1], (current_setting('t.ids')::bigint[])[2]],
                       array[(current_setting('t.claims')::bigint[])[1], (current_setting('t.claims')::bigint[])[2] + 1],
                       array['"r"'::jsonb, null], p_wait => true) $$,
                  $$ values ((current_setting('t.ids')::bigint[])[1], true),
                            ((current_setting('t.ids')::bigint[])[2], false) $$,
                  'ack_many with p_wait: settled under the live claim, false under a stale one');
select is((select result from jobs.job where id = (current_setting('t.ids')::bigint[])[1]), '"r"'::jsonb,
          'the result is stored as without p_wait');
select results_eq($$ select ok, state::text from jobs.nack_many(
                       array[(current_setting('t.ids')::bigint[])[2]],
                       array[(current_setting('t.claims')::bigint[])[2]],
                       null, array['fail'], null, true) $$,
                  $$ values (true, 'failed') $$,
                  'nack_many with p_wait: settled, its new state answered');
select results_eq($$ select ok from jobs.ack_many(
                       array[(current_setting('t.ids')::bigint[])[3]],
                       array[(current_setting('t.claims')::bigint[])[3]], null, null) $$,
                  $$ values (true) $$, 'a null p_wait settles as false does');
select is((select count(*)::int from jobs.lock_key k where k.key like 'settle|%'), 0,
          'no settle key is made when no row is busy');

select is(jobs.settle_waiting((current_setting('t.ids')::bigint[])[1]), false,
          'settle_waiting: false for a job with no settle key');
insert into jobs.lock_key (key, created_at)
values ('settle|' || (current_setting('t.ids')::bigint[])[1], now());
select is(jobs.settle_waiting((current_setting('t.ids')::bigint[])[1]), false,
          'settle_waiting: false for a key nobody else holds');
select is((select count(*)::int from jobs.lock_key k where k.key like 'settle|%'), 1,
          'settle_waiting makes no key');

select * from finish();
rollback;
