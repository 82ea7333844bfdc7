-- The schedules' public surface (sql/80_schedule.sql), pinned like test_surface.sql pins
-- the core: names, argument names and types, result columns. Signatures are frozen.
begin;
select plan(8);

select has_table('jobs', 'schedule', 'jobs.schedule exists');
select has_table('jobs', 'lease', 'jobs.lease exists (the leader lease is the lease named scheduler)');
select set_eq(
  $$ select p.proname::text, pg_catalog.pg_get_function_identity_arguments(p.oid)
       from pg_catalog.pg_proc p
      where p.pronamespace = 'jobs'::regnamespace
        and p.proname = any (array['leader_acquire', 'leader_release', 'leaders', 'schedule_put',
                                   'schedule_pause', 'schedule_resume', 'schedule_remove',
                                   'schedules', 'schedule_fire', 'occurrence_key']) $$,
  $$ values
    ('leader_acquire', 'p_role text, p_holder text, p_lease_s double precision'),
    ('leader_release', 'p_role text, p_holder text, p_token bigint'),
    ('leaders', ''),
    ('schedule_put', 'p_name text, p_definition jsonb'),
    ('schedule_pause', 'p_name text'),
    ('schedule_resume', 'p_name text'),
    ('schedule_remove', 'p_name text'),
    ('schedules', ''),
    ('schedule_fire', 'p_name text, p_occurrences timestamp with time zone[], p_watermark timestamp with time zone, p_token bigint'),
    ('occurrence_key', 'p_schedule text, p_occurrence timestamp with time zone')
  $$,
  'schedule functions keep their names and arguments');
select function_returns('jobs', 'leader_acquire', array['text', 'text', 'double precision'], 'bigint');
select function_returns('jobs', 'schedule_put', array['text', 'jsonb'], 'boolean');
select is(pg_catalog.pg_get_function_result('jobs.schedule_fire(text,timestamptz[],timestamptz,bigint)'::regprocedure),
          'TABLE(occurrence timestamp with time zone, job_id bigint, outcome text)',
          'schedule_fire returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.schedules()'::regprocedure),
          'TABLE(name text, job_name text, cron text, timezone text, catch_up text, options jsonb, payload jsonb, paused boolean, origin text, watermark timestamp with time zone, last_fired_at timestamp with time zone, created_at timestamp with time zone, updated_at timestamp with time zone)',
          'schedules returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.leaders()'::regprocedure),
          'TABLE(role text, holder text, token bigint, lease_expires_at timestamp with time zone, acquired_at timestamp with time zone, live boolean)',
          'leaders returns these columns');

select * from finish();
rollback;
