-- jobs.leader_acquire / leader_release: one holder at a time; the fencing token moves
-- with every new holder; a live lease of another holder answers null.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select is(jobs.leader_acquire('scheduler', 'A', 10), 1::bigint, 'the first holder gets token 1');
select is(jobs.leader_acquire('scheduler', 'B', 10), null::bigint, 'a live lease keeps B out');
set local jobs.fake_now = '2030-01-01 00:00:05+00';
select is(jobs.leader_acquire('scheduler', 'A', 10), 1::bigint, 'A renews with the same token');
select is((select lease_expires_at from jobs.lease), '2030-01-01 00:00:15+00'::timestamptz,
          'the renewal moves the expiry');
set local jobs.fake_now = '2030-01-01 00:00:14+00';
select is(jobs.leader_acquire('scheduler', 'B', 10), null::bigint, 'still live at 14 s');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
select is(jobs.leader_acquire('scheduler', 'B', 10), 2::bigint, 'lapsed: B takes over with token 2');
select results_eq($$ select holder, token, acquired_at, live from jobs.leaders() $$,
                  $$ values ('B', 2::bigint, '2030-01-01 00:00:15+00'::timestamptz, true) $$,
                  'jobs.leaders() shows B live since the takeover');
select is(jobs.leader_acquire('scheduler', 'A', 10), null::bigint, 'deposed A is kept out');
select is(jobs.leader_release('scheduler', 'A', 1), false, 'a deposed holder releases nothing');
select is(jobs.leader_release('scheduler', 'B', 2), true, 'the holder releases');
select is(jobs.leader_acquire('scheduler', 'A', 10), 3::bigint,
          'a released lease is free at once, and the token still moves');
select throws_ok($$ select jobs.leader_acquire('scheduler', 'A', 0) $$, 'SJ001', null,
                 'a lease of zero is refused');

select * from finish();
rollback;
