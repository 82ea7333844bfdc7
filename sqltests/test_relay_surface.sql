-- The outbox's public surface (sql/70_outbox.sql), pinned like test_surface.sql pins the
-- core: names, argument names and types, result columns. Signatures are frozen.
begin;
select plan(7);

select has_table('jobs', 'outbox', 'jobs.outbox exists');
select set_eq(
  $$ select p.proname::text, pg_catalog.pg_get_function_identity_arguments(p.oid)
       from pg_catalog.pg_proc p
      where p.pronamespace = 'jobs'::regnamespace
        and p.proname = any (array['stage', 'stage_many', 'relay', 'purge_outbox', 'outbox_stats']) $$,
  $$ values
    ('stage', 'p_name text, p_key text, p_payload jsonb, p_options jsonb'),
    ('stage_many', 'p_specs jsonb'),
    ('relay', 'p_batch integer, p_relay_id text, p_lease_s double precision'),
    ('purge_outbox', 'p_retention_s double precision, p_max integer'),
    ('outbox_stats', '')
  $$,
  'outbox functions keep their names and arguments');
select is(pg_catalog.pg_get_function_result('jobs.stage(text,text,jsonb,jsonb)'::regprocedure),
          'TABLE(id bigint, outcome text)', 'stage returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.stage_many(jsonb)'::regprocedure),
          'TABLE(ord integer, id bigint, outcome text)', 'stage_many returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.relay(integer,text,double precision)'::regprocedure),
          'TABLE(published integer, deduped integer, held integer)', 'relay returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.purge_outbox(double precision,integer)'::regprocedure),
          'TABLE(purged integer, remaining bigint)', 'purge_outbox returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.outbox_stats()'::regprocedure),
          'TABLE(pending bigint, held bigint, lapsed bigint, published bigint, oldest_pending_s double precision)',
          'outbox_stats returns these columns');

select * from finish();
rollback;
