-- jobs.claim RECOVER: a running job whose lease lapsed goes back to ready with its
-- attempt counted, or, on its final attempt, is buried as dead (failed when
-- dead_letter is off) and never returned. last_error says lease_expired.
begin;
select plan(24);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.job / test.jid / test.claim_of: sqltests/_helpers.sql)

select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "lease.job", "key": "a", "queue": "q_lr", "max_attempts": 3, "priority": 1},
  {"name": "lease.job", "key": "dead", "queue": "q_lr", "max_attempts": 1, "priority": 2},
  {"name": "lease.job", "key": "failed", "queue": "q_lr", "max_attempts": 1, "dead_letter": false, "priority": 3},
  {"name": "lease.job", "key": "other", "queue": "q_lr_other"}
]') $$, 'setup: four jobs');
create temp table c1 as select * from jobs.claim('{q_lr,q_lr_other}', 'w1', 10, 30);
select is((select count(*)::int from c1), 4, 'setup: all four claimed by w1 with a 30 s lease');

-- ---------------------------------------------------------------- not yet lapsed
set local jobs.fake_now = '2030-01-01 00:00:29+00';
select is((select count(*)::int from jobs.claim('{q_lr}', 'w2', 10, 30)), 0, 'a live lease is left alone');
select is((test.job('lease.job', 'a')).state, 'running'::jobs.job_state, 'the job is still running');

-- ---------------------------------------------------------------- lapsed, queue paused
-- Recovery runs for every queue named, paused or not; the pause lets us look at the
-- recovered job before a claim takes it again.
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select lives_ok($$ select jobs.pause_queue('q_lr') $$, 'setup: pause q_lr');
select is((select count(*)::int from jobs.claim('{q_lr}', 'w2', 10, 30)), 0, 'the recovering claim answers nothing');
select results_eq(
  $$ select state, attempt, claim = (select c1.claim from c1 where c1.key = 'a'), lease_expires_at,
            run_at, finished_at
       from jobs.job where name = 'lease.job' and key = 'a' $$,
  $$ values ('ready'::jobs.job_state, 1, true, null::timestamptz,
             '2030-01-01 00:00:00+00'::timestamptz, null::timestamptz) $$,
  'a lapsed job with attempts left is ready again, in its old place (run_at kept), attempt 1 (and its claim token) kept and counted');
select results_eq(
  $$ select last_error->>'kind', (last_error->>'attempt')::int, (last_error->>'at')::timestamptz,
            last_error->>'message' like '%w1%'
       from jobs.job where name = 'lease.job' and key = 'a' $$,
  $$ values ('lease_expired', 1, '2030-01-01 00:01:00+00'::timestamptz, true) $$,
  'last_error: kind lease_expired, the attempt, the time, and the worker in the message');
select results_eq(
  $$ select state, attempt, finished_at, lease_expires_at, last_error->>'kind'
       from jobs.job where name = 'lease.job' and key = 'dead' $$,
  $$ values ('dead'::jobs.job_state, 1, '2030-01-01 00:01:00+00'::timestamptz, null::timestamptz,
             'lease_expired') $$,
  'a lapsed final attempt is buried as dead, finished now, last_error lease_expired');
select results_eq(
  $$ select state, finished_at, last_error->>'kind' from jobs.job where name = 'lease.job' and key = 'failed' $$,
  $$ values ('failed'::jobs.job_state, '2030-01-01 00:01:00+00'::timestamptz, 'lease_expired') $$,
  'with dead_letter off, a lapsed final attempt fails');
select is((test.job('lease.job', 'other')).state, 'running'::jobs.job_state,
          'a lapsed job in a queue the claim did not name is left alone');

-- the stale worker learns it lost the job
select is(jobs.heartbeat(test.jid('lease.job', 'a'), (select claim from c1 where key = 'a'), 30), false,
          'the old claim''s heartbeat answers false');
select throws_ok(format('select jobs.ack(%s, %s)', test.jid('lease.job', 'a'), (select claim from c1 where key = 'a')),
                 'SJ004', null, 'the old claim''s ack raises lease_lost');
select throws_ok(format('select jobs.ack(%s, %s)', test.jid('lease.job', 'dead'), (select claim from c1 where key = 'dead')),
                 'SJ004', null, 'so does an ack of the buried job');

-- ---------------------------------------------------------------- reclaimed
select lives_ok($$ select jobs.resume_queue('q_lr') $$, 'setup: resume q_lr');
create temp table c2 as select * from jobs.claim('{q_lr}', 'w2', 10, 30);
select results_eq($$ select key, attempt, claim >> 32, claim > (select c1.claim from c1 where c1.key = 'a') from c2 $$,
                  $$ values ('a', 2, 2::bigint, true) $$,
                  'the recovered job is claimed again: attempt 2, the second claim token (greater); buried jobs never come back');

-- attempt 2 lapses: back to ready; attempt 3 lapses: dead
set local jobs.fake_now = '2030-01-01 00:02:00+00';
create temp table c3 as select * from jobs.claim('{q_lr}', 'w3', 10, 30);
select results_eq($$ select key, attempt, claim >> 32, claim > (select c2.claim from c2) from c3 $$,
                  $$ values ('a', 3, 3::bigint, true) $$,
                  'lapsed again, it is recovered and claimed in one call: attempt 3, the third claim token');
select is((test.job('lease.job', 'a')).last_error->>'attempt', '2', 'last_error names the lapsed attempt 2');
set local jobs.fake_now = '2030-01-01 00:03:00+00';
select is((select count(*)::int from jobs.claim('{q_lr}', 'w4', 10, 30)), 0,
          'its final attempt lapsed: nothing is claimed');
select results_eq(
  $$ select state, attempt, claim = (select c3.claim from c3), finished_at, last_error->>'kind',
            (last_error->>'attempt')::int
       from jobs.job where name = 'lease.job' and key = 'a' $$,
  $$ values ('dead'::jobs.job_state, 3, true, '2030-01-01 00:03:00+00'::timestamptz,
             'lease_expired', 3) $$,
  'the job is dead after its third lapsed attempt');
select is((select count(*)::int from jobs.claim('{q_lr}', 'w4', 10, 30)), 0, 'and stays buried');

-- the other queue's job is recovered when its queue is named
select results_eq($$ select key, attempt, claim >> 32 from jobs.claim('{q_lr_other}', 'w5', 10, 30) $$,
                  $$ values ('other', 2, 2::bigint) $$,
                  'a claim naming the other queue recovers and takes its lapsed job');

-- a heartbeat keeps a lease alive past its first expiry
set local jobs.fake_now = '2030-01-01 00:03:20+00';
select is(jobs.heartbeat(test.jid('lease.job', 'other'), test.claim_of('lease.job', 'other'), 30), true,
          'a heartbeat renews the lease');
set local jobs.fake_now = '2030-01-01 00:03:40+00';
select is((select count(*)::int from jobs.claim('{q_lr_other}', 'w6', 10, 30)), 0,
          'past the first expiry but within the renewed lease, nothing is recovered');

select * from finish();
rollback;
