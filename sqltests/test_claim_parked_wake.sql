-- jobs.claim wakes parked jobs whose wake-up time (run_at) passed: they become ready
-- and are claimed like any ready job. A job parked with no time (infinity) stays parked.
begin;
select plan(13);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.job: sqltests/_helpers.sql)

select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "park.job", "key": "p60", "queue": "q_park"},
  {"name": "park.job", "key": "p90", "queue": "q_park"},
  {"name": "park.job", "key": "pinf", "queue": "q_park"}
]') $$, 'setup: three jobs');
create temp table c1 as select * from jobs.claim('{q_park}', 'w', 10, 3600);
select results_eq(
  $$ select n::text from c1
       cross join lateral jobs.nack(c1.id, c1.claim, null, 'park',
                                    case c1.key when 'p60' then 60 when 'p90' then 90 end) n
      order by c1.key $$,
  $$ values ('parked'), ('parked'), ('parked') $$,
  'setup: parked for 60 s, 90 s and with no wake-up time');
select is((test.job('park.job', 'pinf')).run_at, 'infinity'::timestamptz, 'setup: no wake-up time is infinity');

set local jobs.fake_now = '2030-01-01 00:00:59+00';
select is((select count(*)::int from jobs.claim('{q_park}', 'w', 10, 3600)), 0, 'before its time, a parked job is not claimed');
select is((test.job('park.job', 'p60')).state, 'parked'::jobs.job_state, 'and stays parked');

-- the time passes while the queue is paused: the claim wakes it but cannot take it
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select lives_ok($$ select jobs.pause_queue('q_park') $$, 'setup: pause the queue');
select is((select count(*)::int from jobs.claim('{q_park}', 'w', 10, 3600)), 0, 'a paused queue answers nothing');
select results_eq($$ select state, run_at, attempt from jobs.job where name = 'park.job' and key = 'p60' $$,
                  $$ values ('ready'::jobs.job_state, '2030-01-01 00:01:00+00'::timestamptz, 0) $$,
                  'a parked job whose time came is ready, its attempt not counted');
select lives_ok($$ select jobs.resume_queue('q_park') $$, 'setup: resume the queue');
select results_eq($$ select key, attempt, claim >> 32, claim > (select c1.claim from c1 where c1.key = 'p60')
                       from jobs.claim('{q_park}', 'w', 10, 3600) $$,
                  $$ values ('p60', 1, 2::bigint, true) $$,
                  'a later claim takes the woken job: attempt 1 again, its second claim token');

-- woken and claimed in the same call
set local jobs.fake_now = '2030-01-01 00:01:30+00';
select results_eq($$ select key from jobs.claim('{q_park}', 'w', 10, 3600) $$,
                  $$ values ('p90') $$, 'a claim at its wake-up time wakes and takes it at once');

set local jobs.fake_now = '2040-01-01 00:00:00+00';
select is((select count(*) from jobs.claim('{q_park}', 'w', 10, 3600) c where c.key = 'pinf')::int, 0,
          'a job parked with no wake-up time is never claimed');
select is((test.job('park.job', 'pinf')).state, 'parked'::jobs.job_state, 'it stays parked');

select * from finish();
rollback;
