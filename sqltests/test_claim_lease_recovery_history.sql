-- jobs.claim RECOVER writes the attempt history (jobs.job.attempts, sql/30_claim.sql):
-- a lapsed attempt is appended with outcome lease_expired, ended_at its lease's expiry
-- and the lease_expired error that last_error holds, whether the job goes back to
-- ready or is buried; the claim's other phases (pick, claim) write nothing.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local timezone = 'UTC';
-- (test.job: sqltests/_helpers.sql)

select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "lrh.job", "key": "a", "queue": "q_lrh", "max_attempts": 2, "priority": 1},
  {"name": "lrh.job", "key": "dead", "queue": "q_lrh", "max_attempts": 1, "priority": 2}
]') $$, 'setup: two jobs');
create temp table c1 as select * from jobs.claim('{q_lrh}', 'w1', 10, 30);
select is((select count(*)::int from c1), 2, 'setup: both claimed by w1 with a 30 s lease');
select is((select count(*)::int from jobs.job j where j.name = 'lrh.job' and j.attempts is not null), 0,
          'claiming writes no history');

-- lapsed; the queue paused so that the recovered job waits to be looked at
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select lives_ok($$ select jobs.pause_queue('q_lrh') $$, 'setup: pause q_lrh');
select is((select count(*)::int from jobs.claim('{q_lrh}', 'w2', 10, 30)), 0, 'setup: the recovering claim');
select is((test.job('lrh.job', 'a')).attempts,
          pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'attempt', 1, 'claim', (select c1.claim >> 32 from c1 where c1.key = 'a'), 'worker', 'w1', 'started_at', '2030-01-01T00:00:00+00:00',
            'ended_at', '2030-01-01T00:00:30+00:00', 'outcome', 'lease_expired',
            'error', (test.job('lrh.job', 'a')).last_error)),
          'a recovered attempt is appended: its claim ordinal, outcome lease_expired, ended when its lease lapsed, its error');
select is((test.job('lrh.job', 'dead')).attempts->0->>'outcome' || ' / ' || (test.job('lrh.job', 'dead')).state,
          'lease_expired / dead', 'a buried job''s lapsed attempt is appended too');

-- claimed again, then it succeeds: nothing more is written
select lives_ok($$ select jobs.resume_queue('q_lrh') $$, 'setup: resume q_lrh');
select is((select pg_catalog.jsonb_array_length(j.attempts)
             from jobs.claim('{q_lrh}', 'w3', 10, 30) c join jobs.job j on j.id = c.id), 1,
          'claiming the recovered job again adds nothing');

select * from finish();
rollback;
