-- jobs.schedule_fire is fenced on the scheduler lease: no lease, a lapsed lease or a
-- deposed token is not_leader (SJ030) and writes nothing.
begin;
select plan(7);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.schedule_put('sf.tick', '{"job": "sf.job", "cron": "* * * * *"}') $$,
                'setup: a schedule');
select throws_ok($$ select jobs.schedule_fire('sf.tick', '{2030-01-01 00:00:00+00}', '2030-01-01 00:00:00+00', 1) $$,
                 'SJ030', null, 'no lease at all: not_leader');

select is(jobs.leader_acquire('scheduler', 'A', 10), 1::bigint, 'setup: A leads');
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select throws_ok($$ select jobs.schedule_fire('sf.tick', '{2030-01-01 00:01:00+00}', '2030-01-01 00:01:00+00', 1) $$,
                 'SJ030', null, 'A''s lease lapsed (even untaken): not_leader');
select is(jobs.leader_acquire('scheduler', 'B', 10), 2::bigint, 'setup: B takes over');
select throws_ok($$ select jobs.schedule_fire('sf.tick', '{2030-01-01 00:01:00+00}', '2030-01-01 00:01:00+00', 1) $$,
                 'SJ030', null, 'the deposed token is refused');
select results_eq($$ select (select count(*)::int from jobs.job),
                            (select watermark from jobs.schedule) $$,
                  $$ values (0, '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'no job, and the watermark did not move');

select * from finish();
rollback;
