-- jobs.schedule_fire moves the watermark in the same transaction as the fire, never
-- back; occurrences at or before the watermark are not fired again; a paused schedule
-- fires nothing; future occurrences are refused.
begin;
select plan(10);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.schedule_put('sw.tick', '{"job": "sw.job", "cron": "* * * * *"}') $$,
                'setup: a schedule, watermark now');
select is((select watermark from jobs.schedule), '2030-01-01 00:00:00+00'::timestamptz,
          'a new schedule starts at now');
create temporary table tok as select jobs.leader_acquire('scheduler', 'A', 3600) as t;

set local jobs.fake_now = '2030-01-01 00:02:30+00';
select results_eq(
  $$ select occurrence, outcome from jobs.schedule_fire('sw.tick',
       '{2030-01-01 00:00:00+00, 2030-01-01 00:01:00+00, 2030-01-01 00:02:00+00}',
       '2030-01-01 00:02:30+00', (select t from tok)) $$,
  $$ values ('2030-01-01 00:01:00+00'::timestamptz, 'created'), ('2030-01-01 00:02:00+00', 'created') $$,
  'occurrences after the watermark fire; the one at the watermark is already done');
select results_eq($$ select watermark, last_fired_at from jobs.schedule $$,
                  $$ values ('2030-01-01 00:02:30+00'::timestamptz, '2030-01-01 00:02:00+00'::timestamptz) $$,
                  'the watermark and last_fired_at moved with the fire');
select is_empty($$ select * from jobs.schedule_fire('sw.tick', '{2030-01-01 00:02:00+00}',
                     '2030-01-01 00:02:00+00', (select t from tok)) $$,
                'a repeated fire (e.g. a restarted scheduler) fires nothing ...');
select is((select watermark from jobs.schedule), '2030-01-01 00:02:30+00'::timestamptz,
          '... and the watermark never moves back');
select throws_ok($$ select jobs.schedule_fire('sw.tick', '{2030-01-01 00:03:00+00}',
                     '2030-01-01 00:03:00+00', (select t from tok)) $$,
                 'SJ001', null, 'a future occurrence or watermark is refused');
select throws_ok($$ select jobs.schedule_fire('sw.tick', '{2030-01-01 00:02:40+00}',
                     '2030-01-01 00:02:35+00', (select t from tok)) $$,
                 'SJ001', null, 'an occurrence after the watermark given is refused');

select lives_ok($$ select jobs.schedule_pause('sw.tick') $$, 'setup: pause');
set local jobs.fake_now = '2030-01-01 00:05:00+00';
select results_eq(
  $$ select (select count(*)::int from jobs.schedule_fire('sw.tick', '{2030-01-01 00:04:00+00}',
                '2030-01-01 00:05:00+00', (select t from tok))),
            (select watermark from jobs.schedule) $$,
  $$ values (0, '2030-01-01 00:02:30+00'::timestamptz) $$,
  'a paused schedule fires nothing and keeps its watermark');

select * from finish();
rollback;
