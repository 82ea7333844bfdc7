-- jobs.leader_acquire / leader_release: one holder at a time; the fencing token moves
-- with every new holder (greater, its low half random: sql/00_schema.sql, "Fencing
-- tokens"); a live lease of another holder answers null. jobs.leaders() keeps its token
-- column (a released result) but it is always null: a token is its holder's proof.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table tok (who text primary key, token bigint);
insert into tok values ('A', jobs.leader_acquire('scheduler', 'A', 10));
select is((select token >> 32 from tok where who = 'A'), 1::bigint, 'the first holder gets the first token (high half 1)');
select is(jobs.leader_acquire('scheduler', 'B', 10), null::bigint, 'a live lease keeps B out');
set local jobs.fake_now = '2030-01-01 00:00:05+00';
select is(jobs.leader_acquire('scheduler', 'A', 10), (select token from tok where who = 'A'), 'A renews with the same token');
select is((select lease_expires_at from jobs.lease), '2030-01-01 00:00:15+00'::timestamptz,
          'the renewal moves the expiry');
set local jobs.fake_now = '2030-01-01 00:00:14+00';
select is(jobs.leader_acquire('scheduler', 'B', 10), null::bigint, 'still live at 14 s');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
insert into tok values ('B', jobs.leader_acquire('scheduler', 'B', 10));
select results_eq($$ select token >> 32, token > (select t.token from tok t where t.who = 'A') from tok where who = 'B' $$,
                  $$ values (2::bigint, true) $$, 'lapsed: B takes over with the second token, greater');
select results_eq($$ select holder, token, acquired_at, live from jobs.leaders() $$,
                  $$ values ('B', null::bigint, '2030-01-01 00:00:15+00'::timestamptz, true) $$,
                  'jobs.leaders() shows B live since the takeover, and no token (null)');
select is(jobs.leader_acquire('scheduler', 'A', 10), null::bigint, 'deposed A is kept out');
select is(jobs.leader_release('scheduler', 'A', (select token from tok where who = 'A')), false,
          'a deposed holder releases nothing');
select is(jobs.leader_release('scheduler', 'B', (select token from tok where who = 'A') + 1), false,
          'nor does the holder''s name under a guessed token (the old one + 1)');
select is(jobs.leader_release('scheduler', 'B', (select token from tok where who = 'B')), true, 'the holder releases');
insert into tok values ('A3', jobs.leader_acquire('scheduler', 'A', 10));
select results_eq($$ select token >> 32, token > (select t.token from tok t where t.who = 'B') from tok where who = 'A3' $$,
                  $$ values (3::bigint, true) $$,
                  'a released lease is free at once, and the token still moves (the third)');
select is((select count(distinct token & 4294967295)::int from tok), 3, 'the three tokens differ in their random low half');
select throws_ok($$ select jobs.leader_acquire('scheduler', 'A', 0) $$, 'SJ001', null,
                 'a lease of zero is refused');

select * from finish();
rollback;
