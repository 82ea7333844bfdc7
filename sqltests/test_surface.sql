-- The public surface of the jobs schema, pinned (docs/design/schema-upgrades.md: signatures are frozen once
-- released). A change here is a change to the API: add a function with a new name instead.
-- Functions not listed here are private helpers.
begin;
select plan(103);

select has_schema('jobs');
select has_table('jobs', 'job', 'jobs.job exists');
select has_table('jobs', 'queue', 'jobs.queue exists');
select has_view('jobs', 'job_view', 'jobs.job_view exists');
select has_type('jobs', 'job_state', 'jobs.job_state exists');
select enum_has_labels('jobs', 'job_state',
  array['ready', 'running', 'parked', 'succeeded', 'failed', 'dead', 'cancelled', 'interrupted'],
  'jobs.job_state has its eight states, in order');

-- Every public function: present with these argument types, returning this type.
select has_function('jobs', 'enqueue', array['text', 'text', 'jsonb', 'jsonb']);
select function_returns('jobs', 'enqueue', array['text', 'text', 'jsonb', 'jsonb'], 'setof record');
select has_function('jobs', 'enqueue_many', array['jsonb']);
select function_returns('jobs', 'enqueue_many', array['jsonb'], 'setof record');
select has_function('jobs', 'claim', array['text[]', 'text', 'integer', 'double precision', 'jsonb']);
select function_returns('jobs', 'claim', array['text[]', 'text', 'integer', 'double precision', 'jsonb'], 'setof record');
select has_function('jobs', 'ack', array['bigint', 'bigint', 'jsonb']);
select function_returns('jobs', 'ack', array['bigint', 'bigint', 'jsonb'], 'void');
select has_function('jobs', 'ack_many', array['bigint[]', 'bigint[]', 'jsonb[]']);
select function_returns('jobs', 'ack_many', array['bigint[]', 'bigint[]', 'jsonb[]'], 'setof record');
select has_function('jobs', 'nack', array['bigint', 'bigint', 'jsonb', 'text', 'double precision']);
select function_returns('jobs', 'nack', array['bigint', 'bigint', 'jsonb', 'text', 'double precision'], 'jobs.job_state');
select has_function('jobs', 'nack_many', array['bigint[]', 'bigint[]', 'jsonb[]', 'text[]', 'double precision[]']);
select function_returns('jobs', 'nack_many', array['bigint[]', 'bigint[]', 'jsonb[]', 'text[]', 'double precision[]'], 'setof record');
select has_function('jobs', 'heartbeat', array['bigint', 'bigint', 'double precision']);
select function_returns('jobs', 'heartbeat', array['bigint', 'bigint', 'double precision'], 'boolean');
select has_function('jobs', 'heartbeat_many', array['bigint[]', 'bigint[]', 'double precision']);
select function_returns('jobs', 'heartbeat_many', array['bigint[]', 'bigint[]', 'double precision'], 'setof record');
select has_function('jobs', 'progress', array['bigint', 'bigint', 'jsonb']);
select function_returns('jobs', 'progress', array['bigint', 'bigint', 'jsonb'], 'boolean');
select has_function('jobs', 'cancel', array['bigint']);
select function_returns('jobs', 'cancel', array['bigint'], 'void');
select has_function('jobs', 'requeue', array['bigint[]']);
select function_returns('jobs', 'requeue', array['bigint[]'], 'void');
select has_function('jobs', 'promote', array['bigint']);
select function_returns('jobs', 'promote', array['bigint'], 'void');
select has_function('jobs', 'remove', array['bigint']);
select function_returns('jobs', 'remove', array['bigint'], 'void');
select has_function('jobs', 'cancel_where', array['jsonb', 'integer']);
select function_returns('jobs', 'cancel_where', array['jsonb', 'integer'], 'setof record');
select has_function('jobs', 'requeue_where', array['jsonb', 'integer']);
select function_returns('jobs', 'requeue_where', array['jsonb', 'integer'], 'setof record');
select has_function('jobs', 'promote_where', array['jsonb', 'integer']);
select function_returns('jobs', 'promote_where', array['jsonb', 'integer'], 'setof record');
select has_function('jobs', 'remove_where', array['jsonb', 'integer']);
select function_returns('jobs', 'remove_where', array['jsonb', 'integer'], 'setof record');
select has_function('jobs', 'pause_queue', array['text']);
select function_returns('jobs', 'pause_queue', array['text'], 'void');
select has_function('jobs', 'resume_queue', array['text']);
select function_returns('jobs', 'resume_queue', array['text'], 'void');
select has_function('jobs', 'queue_stats', '{}'::name[]);
select function_returns('jobs', 'queue_stats', '{}'::name[], 'setof record');
select has_function('jobs', 'job_payload', array['bigint']);
select function_returns('jobs', 'job_payload', array['bigint'], 'jsonb');
select has_function('jobs', 'schema_version', '{}'::name[]);
select function_returns('jobs', 'schema_version', '{}'::name[], 'integer');
select has_function('jobs', 'now', '{}'::name[]);
select function_returns('jobs', 'now', '{}'::name[], 'timestamp with time zone');
select has_function('jobs', 'error_codes', '{}'::name[]);
select function_returns('jobs', 'error_codes', '{}'::name[], 'setof record');
select has_function('jobs', 'raise_error', array['text', 'text', 'text', 'text']);
select function_returns('jobs', 'raise_error', array['text', 'text', 'text', 'text'], 'void');
select has_function('jobs', 'backoff_s', array['integer', 'double precision', 'double precision', 'text']);
select function_returns('jobs', 'backoff_s', array['integer', 'double precision', 'double precision', 'text'], 'double precision');
select has_function('jobs', 'max_payload_bytes', '{}'::name[]);
select function_returns('jobs', 'max_payload_bytes', '{}'::name[], 'integer');
select has_function('jobs', 'spec_problem', array['jsonb']);
select function_returns('jobs', 'spec_problem', array['jsonb'], 'text');
-- Result waiters (sql/40_settle.sql).
select has_function('jobs', 'watch_outcome', array['bigint']);
select is(pg_catalog.pg_get_function_result('jobs.watch_outcome(bigint)'::regprocedure),
          'TABLE(id bigint, state jobs.job_state, result jsonb, last_error jsonb)',
          'watch_outcome returns these columns');
-- Durable steps and events (sql/50_steps.sql, sql/60_events.sql).
select has_table('jobs', 'step', 'jobs.step exists');
select has_table('jobs', 'event', 'jobs.event exists');
select has_table('jobs', 'event_wait', 'jobs.event_wait exists');
select function_returns('jobs', 'step_put', array['bigint', 'bigint', 'text', 'jsonb', 'double precision', 'jsonb'], 'jsonb');
select function_returns('jobs', 'step_unwound', array['bigint', 'bigint'], 'jobs.job_state');
select is(pg_catalog.pg_get_function_result('jobs.step_sleep(bigint,bigint,text,timestamptz,double precision)'::regprocedure),
          'TABLE(wake_at timestamp with time zone, parked boolean)', 'step_sleep returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.step_wait(bigint,bigint,text,jsonb,double precision,double precision)'::regprocedure),
          'TABLE(value jsonb, parked boolean)', 'step_wait returns these columns');
select function_returns('jobs', 'emit_event', array['text', 'jsonb'], 'bigint');
select is(pg_catalog.pg_get_function_result('jobs.job_steps(bigint)'::regprocedure),
          'TABLE(name text, ordinal integer, kind text, value jsonb, created_at timestamp with time zone)', 'job_steps returns these columns');
select function_returns('jobs', 'purge_events', array['timestamp with time zone', 'integer'], 'integer');
select is(pg_catalog.pg_get_function_result('jobs.step_invoke(bigint,bigint,text[],jsonb,double precision)'::regprocedure),
          'TABLE(name text, value jsonb, child_id bigint, parked boolean)', 'step_invoke returns these columns');

-- Functions returning a table: the columns, by name and type, in order.
select is(pg_catalog.pg_get_function_result('jobs.enqueue(text,text,jsonb,jsonb)'::regprocedure),
          'TABLE(id bigint, outcome text)',
          'enqueue returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.enqueue_many(jsonb)'::regprocedure),
          'TABLE(ord integer, id bigint, outcome text)',
          'enqueue_many returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.claim(text[],text,integer,double precision,jsonb)'::regprocedure),
          'TABLE(id bigint, name text, queue text, tenant text, key text, payload jsonb, priority smallint, attempt integer, max_attempts integer, retry_base_s double precision, retry_cap_s double precision, retry_jitter text, claim bigint, lease_expires_at timestamp with time zone, timeout_s double precision, progress jsonb, traceparent text, created_at timestamp with time zone, started_at timestamp with time zone, steps jsonb)',
          'claim returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.ack_many(bigint[],bigint[],jsonb[])'::regprocedure),
          'TABLE(id bigint, ok boolean)',
          'ack_many returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.nack_many(bigint[],bigint[],jsonb[],text[],double precision[])'::regprocedure),
          'TABLE(id bigint, ok boolean, state jobs.job_state)',
          'nack_many returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.heartbeat_many(bigint[],bigint[],double precision)'::regprocedure),
          'TABLE(id bigint, ok boolean)',
          'heartbeat_many returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.cancel_where(jsonb,integer)'::regprocedure),
          'TABLE(moved integer, remaining bigint)',
          'cancel_where returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.requeue_where(jsonb,integer)'::regprocedure),
          'TABLE(moved integer, remaining bigint)',
          'requeue_where returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.promote_where(jsonb,integer)'::regprocedure),
          'TABLE(moved integer, remaining bigint)',
          'promote_where returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.remove_where(jsonb,integer)'::regprocedure),
          'TABLE(moved integer, remaining bigint)',
          'remove_where returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.queue_stats()'::regprocedure),
          'TABLE(queue text, paused boolean, ready bigint, running bigint, parked bigint, interrupted bigint, succeeded bigint, failed bigint, dead bigint, cancelled bigint, oldest_ready_s double precision, unserved bigint)',
          'queue_stats returns version 1''s columns');
select is(pg_catalog.pg_get_function_result('jobs.queue_stats_v2()'::regprocedure),
          'TABLE(queue text, paused boolean, ready bigint, running bigint, parked bigint, interrupted bigint, succeeded bigint, failed bigint, dead bigint, cancelled bigint, oldest_ready_s double precision, unserved bigint, limited bigint)',
          'queue_stats_v2 returns these columns');
select is(jobs.schema_floor(), 1, 'schema_floor: every client of version 1 on is served');
select is(pg_catalog.pg_get_function_result('jobs.error_codes()'::regprocedure),
          'TABLE(sqlstate text, name text, meaning text)',
          'error_codes returns these columns');

-- Version 2's new public functions (the trust boundary): the job types a worker serves,
-- the scheduler's retention batch, the notification tokens.
select has_function('jobs', 'job_type_declare', array['text', 'jsonb']);
select function_returns('jobs', 'job_type_declare', array['text', 'jsonb'], 'boolean');
select has_function('jobs', 'retention_sweep', array['integer']);
select is(pg_catalog.pg_get_function_result('jobs.retention_sweep(integer)'::regprocedure),
          'TABLE(what text, deleted bigint, remaining bigint)', 'retention_sweep returns these columns');
select has_function('jobs', 'wake_tokens', array['text[]']);
select is(pg_catalog.pg_get_function_result('jobs.wake_tokens(text[])'::regprocedure),
          'TABLE(queue text, token text)', 'wake_tokens returns these columns');
select has_function('jobs', 'watch_token', array['bigint']);
select function_returns('jobs', 'watch_token', array['bigint'], 'text');
select results_eq($$ select sqlstate, name from jobs.error_codes() where sqlstate in ('SJ019', 'SJ020') order by 1 $$,
                  $$ values ('SJ019', 'setting_refused'), ('SJ020', 'worker_id_taken') $$,
                  'error_codes lists version 2''s setting_refused (SJ019) and worker_id_taken (SJ020)');
select is(pg_catalog.pg_get_function_result('jobs.leaders()'::regprocedure),
          'TABLE(role text, holder text, token bigint, lease_expires_at timestamp with time zone, acquired_at timestamp with time zone, live boolean)',
          'leaders keeps version 1''s columns (its token column is null since version 2)');

-- Argument names and types (callers may pass them by name: p_limit => 10), in order.
select set_eq(
  $$ select p.proname::text, pg_catalog.pg_get_function_identity_arguments(p.oid)
       from pg_catalog.pg_proc p
      where p.pronamespace = 'jobs'::regnamespace
        and p.proname = any (array['enqueue', 'enqueue_many', 'claim', 'ack', 'ack_many', 'nack', 'nack_many', 'heartbeat', 'heartbeat_many', 'progress', 'cancel', 'requeue', 'promote', 'remove', 'cancel_where', 'requeue_where', 'promote_where', 'remove_where', 'pause_queue', 'resume_queue', 'queue_stats', 'job_payload', 'schema_version', 'now', 'error_codes', 'raise_error', 'backoff_s', 'max_payload_bytes', 'spec_problem', 'step_put', 'step_sleep', 'step_wait', 'emit_event', 'job_steps', 'purge_events', 'step_invoke', 'step_unwound', 'watch_outcome']) $$,
  $$ values
    ('ack', 'p_id bigint, p_claim bigint, p_result jsonb'),
    ('ack_many', 'p_ids bigint[], p_claims bigint[], p_results jsonb[]'),
    ('backoff_s', 'p_attempt integer, p_base_s double precision, p_cap_s double precision, p_jitter text'),
    ('cancel', 'p_id bigint'),
    ('cancel_where', 'p_filter jsonb, p_max integer'),
    ('claim', 'p_queues text[], p_worker text, p_limit integer, p_lease_s double precision, p_options jsonb'),
    ('enqueue', 'p_name text, p_key text, p_payload jsonb, p_options jsonb'),
    ('enqueue_many', 'p_specs jsonb'),
    ('error_codes', ''),
    ('heartbeat', 'p_id bigint, p_claim bigint, p_lease_s double precision'),
    ('heartbeat_many', 'p_ids bigint[], p_claims bigint[], p_lease_s double precision'),
    ('job_payload', 'p_id bigint'),
    ('max_payload_bytes', ''),
    ('nack', 'p_id bigint, p_claim bigint, p_error jsonb, p_mode text, p_delay_s double precision'),
    ('nack_many', 'p_ids bigint[], p_claims bigint[], p_errors jsonb[], p_modes text[], p_delays_s double precision[]'),
    ('now', ''),
    ('pause_queue', 'p_queue text'),
    ('progress', 'p_id bigint, p_claim bigint, p_progress jsonb'),
    ('promote', 'p_id bigint'),
    ('promote_where', 'p_filter jsonb, p_max integer'),
    ('queue_stats', ''),
    ('raise_error', 'p_name text, p_message text, p_detail text, p_hint text'),
    ('remove', 'p_id bigint'),
    ('remove_where', 'p_filter jsonb, p_max integer'),
    ('requeue', 'p_ids bigint[]'),
    ('requeue_where', 'p_filter jsonb, p_max integer'),
    ('resume_queue', 'p_queue text'),
    ('schema_version', ''),
    ('spec_problem', 'p_specs jsonb'),
    ('step_put', 'p_id bigint, p_claim bigint, p_name text, p_value jsonb, p_lease_s double precision, p_options jsonb'),
    ('step_unwound', 'p_id bigint, p_claim bigint'),
    ('step_sleep', 'p_id bigint, p_claim bigint, p_name text, p_until timestamp with time zone, p_delay_s double precision'),
    ('step_wait', 'p_id bigint, p_claim bigint, p_name text, p_specs jsonb, p_timeout_s double precision, p_lease_s double precision'),
    ('emit_event', 'p_name text, p_payload jsonb'),
    ('job_steps', 'p_id bigint'),
    ('purge_events', 'p_before timestamp with time zone, p_max integer'),
    ('step_invoke', 'p_id bigint, p_claim bigint, p_names text[], p_specs jsonb, p_lease_s double precision'),
    ('watch_outcome', 'p_id bigint')
  $$,
  'public functions keep their argument names');

-- Every function in the schema, public or private, pins search_path = ''.
select is_empty(
  $$ select p.oid::regprocedure::text
       from pg_catalog.pg_proc p
      where p.pronamespace = 'jobs'::regnamespace
        and not ('search_path=""' = any (coalesce(p.proconfig, '{}'))) $$,
  'every jobs function sets search_path = ''''');

select * from finish();
rollback;
