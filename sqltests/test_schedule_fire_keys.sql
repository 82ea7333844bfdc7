-- jobs.schedule_fire enqueues each occurrence once, under the key
-- '<schedule>@<UTC ISO occurrence>', run_at = the occurrence, with the schedule's
-- options and payload; firing the same occurrence again answers the same job.
begin;
select plan(7);

set local jobs.notify = off;
set local jobs.fake_now = '2030-03-31 00:00:00+00';
select lives_ok($$ select jobs.schedule_put('sk.daily', '{"job": "sk.job", "cron": "30 2 * * *",
                   "timezone": "Europe/Paris", "catch_up": "all",
                   "options": {"queue": "sk_q", "priority": 5, "max_attempts": 2},
                   "payload": {"report": "daily"}}') $$, 'setup: a schedule');
update jobs.schedule set watermark = '2030-03-29 00:00:00+00';
create temporary table tok as select jobs.leader_acquire('scheduler', 'A', 3600) as t;

select results_eq(
  $$ select occurrence, outcome from jobs.schedule_fire('sk.daily',
       '{2030-03-30 00:30:00+00, 2030-03-31 00:00:00+00}', '2030-03-31 00:00:00+00',
       (select t from tok)) $$,
  $$ values ('2030-03-30 00:30:00+00'::timestamptz, 'created'), ('2030-03-31 00:00:00+00', 'created') $$,
  'two occurrences, two jobs');
select results_eq(
  $$ select key, queue, priority, max_attempts, payload, run_at from jobs.job order by run_at $$,
  $$ values ('sk.daily@2030-03-30T00:30:00Z', 'sk_q', 5::smallint, 2, '{"report": "daily"}'::jsonb,
             '2030-03-30 00:30:00+00'::timestamptz),
            ('sk.daily@2030-03-31T00:00:00Z', 'sk_q', 5::smallint, 2, '{"report": "daily"}'::jsonb,
             '2030-03-31 00:00:00+00'::timestamptz) $$,
  'the occurrence key is in UTC; options, payload and run_at come from the schedule');

-- A second scheduler whose watermark was lost (or a clock behind) fires them again.
update jobs.schedule set watermark = '2030-03-29 00:00:00+00';
select results_eq(
  $$ select outcome, job_id from jobs.schedule_fire('sk.daily',
       '{2030-03-30 00:30:00+00, 2030-03-31 00:00:00+00}', '2030-03-31 00:00:00+00',
       (select t from tok)) $$,
  $$ select 'deduped'::text, id from jobs.job order by run_at $$,
  'firing an occurrence again answers its job: deduped');
select is((select count(*)::int from jobs.job), 2, 'still two jobs');
select is(jobs.occurrence_key('t', '2030-01-01 00:00:00.25+00'), 't@2030-01-01T00:00:00.25Z',
          'a fraction of a second is kept in the key');
select throws_ok($$ select jobs.schedule_fire('nope', '{}', '2030-03-31 00:00:00+00', (select t from tok)) $$,
                 'SJ031', null, 'an unknown schedule is schedule_not_found');

select * from finish();
rollback;
