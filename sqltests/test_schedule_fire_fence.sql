-- jobs.schedule_fire is fenced on the scheduler lease: no lease, a lapsed lease, a
-- deposed token or a guessed one is not_leader (SJ030) and writes nothing.
begin;
select plan(10);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table tok (who text primary key, token bigint);
select lives_ok($$ select jobs.schedule_put('sf.tick', '{"job": "sf.job", "cron": "* * * * *"}') $$,
                'setup: a schedule');
select throws_ok($$ select jobs.schedule_fire('sf.tick', '{2030-01-01 00:00:00+00}', '2030-01-01 00:00:00+00', 1) $$,
                 'SJ030', null, 'no lease at all: not_leader');

insert into tok values ('A', jobs.leader_acquire('scheduler', 'A', 10));
select is((select token >> 32 from tok where who = 'A'), 1::bigint, 'setup: A leads (the first token)');
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select throws_ok(format('select jobs.schedule_fire(%L, %L, %L, %s)', 'sf.tick', '{2030-01-01 00:01:00+00}',
                        '2030-01-01 00:01:00+00', (select token from tok where who = 'A')),
                 'SJ030', null, 'A''s lease lapsed (even untaken): not_leader');
insert into tok values ('B', jobs.leader_acquire('scheduler', 'B', 10));
select is((select token >> 32 from tok where who = 'B'), 2::bigint, 'setup: B takes over (the second token)');
select throws_ok(format('select jobs.schedule_fire(%L, %L, %L, %s)', 'sf.tick', '{2030-01-01 00:01:00+00}',
                        '2030-01-01 00:01:00+00', (select token from tok where who = 'A')),
                 'SJ030', null, 'the deposed token is refused');
select throws_ok(format('select jobs.schedule_fire(%L, %L, %L, %s)', 'sf.tick', '{2030-01-01 00:01:00+00}',
                        '2030-01-01 00:01:00+00', (select ((token >> 32) << 32) + 1 from tok where who = 'B')),
                 'SJ030', null, 'a guessed token (the live high half, low half 1) is refused');
select throws_ok(format('select jobs.schedule_fire(%L, %L, %L, %s)', 'sf.tick', '{2030-01-01 00:01:00+00}',
                        '2030-01-01 00:01:00+00', (select token + 1 from tok where who = 'A')),
                 'SJ030', null, 'so is the deposed token + 1 (what a counter would have made)');
select results_eq($$ select (select count(*)::int from jobs.job),
                            (select watermark from jobs.schedule) $$,
                  $$ values (0, '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'no job, and the watermark did not move');
select lives_ok(format('select jobs.schedule_fire(%L, %L, %L, %s)', 'sf.tick', '{2030-01-01 00:01:00+00}',
                       '2030-01-01 00:01:00+00', (select token from tok where who = 'B')),
                'the live leader''s own token fires');

select * from finish();
rollback;
