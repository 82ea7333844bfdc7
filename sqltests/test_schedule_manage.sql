-- jobs.schedule_put / pause / resume / remove / schedules(): run-time management.
begin;
select plan(13);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select is(jobs.schedule_put('sm.a', '{"job": "sm.job", "cron": "*/5 * * * *"}'), true, 'a new schedule');
select results_eq($$ select name, job_name, cron, timezone, catch_up, paused, origin, watermark
                       from jobs.schedules() $$,
                  $$ values ('sm.a', 'sm.job', '*/5 * * * *', 'UTC', 'latest', false, 'api',
                             '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'defaults: UTC, latest, api, watermark now');
set local jobs.fake_now = '2030-01-01 00:10:00+00';
select is(jobs.schedule_put('sm.a', '{"job": "sm.job", "cron": "0 * * * *", "catch_up": "all"}'),
          false, 'putting it again updates it');
select results_eq($$ select cron, catch_up, watermark, updated_at from jobs.schedules() $$,
                  $$ values ('0 * * * *', 'all', '2030-01-01 00:00:00+00'::timestamptz,
                             '2030-01-01 00:10:00+00'::timestamptz) $$,
                  'an update keeps the watermark');
select lives_ok($$ select jobs.schedule_pause('sm.a'); select jobs.schedule_pause('sm.a') $$,
                'pausing twice is harmless');
set local jobs.fake_now = '2030-01-01 01:00:00+00';
select lives_ok($$ select jobs.schedule_resume('sm.a') $$, 'resume');
select results_eq($$ select paused, watermark from jobs.schedules() $$,
                  $$ values (false, '2030-01-01 01:00:00+00'::timestamptz) $$,
                  'resuming skips what was missed while paused');
select throws_ok($$ select jobs.schedule_pause('sm.none') $$, 'SJ031', null, 'pause: unknown');
select throws_ok($$ select jobs.schedule_resume('sm.none') $$, 'SJ031', null, 'resume: unknown');
select lives_ok($$ select jobs.schedule_remove('sm.a') $$, 'remove');
select throws_ok($$ select jobs.schedule_remove('sm.a') $$, 'SJ031', null, 'remove: unknown');
select throws_ok($$ select jobs.schedule_put('sm.b', '{"job": "sm.job", "cron": "* * * * *",
                     "timezone": "Mars/Olympus"}') $$, 'SJ001', null, 'an unknown time zone');
select throws_ok($$ select jobs.schedule_put('sm.b', '{"job": "sm.job", "cron": "* * * * *",
                     "options": {"priority": 99999}}') $$, 'SJ001', null,
                 'options that make a bad enqueue spec');

select * from finish();
rollback;
