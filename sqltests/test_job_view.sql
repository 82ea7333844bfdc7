-- jobs.job_view: every job, its payload redacted (a name with no job type shows none:
-- test_redaction.sql has the rest); jobs.job_payload(id) returns the payload (null for
-- a missing job).
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select has_view('jobs', 'job_view', 'jobs.job_view exists');
select has_column('jobs', 'job_view', 'payload', 'job_view has a (redacted) payload column');
select columns_are('jobs', 'job_view', array[
  'id', 'name', 'queue', 'tenant', 'key', 'state', 'priority', 'run_at', 'attempt', 'max_attempts',
  'retry_base_s', 'retry_cap_s', 'retry_jitter', 'dead_letter', 'timeout_s', 'claim',
  'lease_expires_at', 'worker', 'progress', 'last_error', 'result', 'traceparent', 'created_at',
  'started_at', 'finished_at', 'payload', 'parent_id', 'parent_step', 'actor'], 'job_view has these columns of a job');

create temp table e as
  select * from jobs.enqueue('view.job', 'k', '{"secret": "s3cr3t", "n": [1, 2]}', '{"queue": "q_view", "tenant": "acme"}');
select results_eq($$ select v.id, v.name, v.queue, v.tenant, v.key, v.state from jobs.job_view v where v.name = 'view.job' $$,
                  $$ select id, 'view.job', 'q_view', 'acme', 'k', 'ready'::jobs.job_state from e $$,
                  'a job shows in job_view');
select is((select pg_catalog.to_jsonb(v)::text like '%s3cr3t%' from jobs.job_view v where v.name = 'view.job'), false,
          'no part of the view row carries the payload');
select is(jobs.job_payload((select id from e)), '{"secret": "s3cr3t", "n": [1, 2]}'::jsonb, 'job_payload returns the payload');
select is(jobs.job_payload(-1), null, 'job_payload of a missing job is null');

do $$ begin perform jobs.ack(c.id, c.claim, '{"r": 1}') from jobs.claim('{q_view}', 'w', 1, 30) c; end $$;
select results_eq($$ select state::text, result, finished_at from jobs.job_view where name = 'view.job' $$,
                  $$ values ('succeeded', '{"r": 1}'::jsonb, '2030-01-01 00:00:00+00'::timestamptz) $$,
                  'the view follows the job''s state');

select * from finish();
rollback;
