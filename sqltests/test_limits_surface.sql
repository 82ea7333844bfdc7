-- The flow-control surface (sql/35_limits.sql), pinned like test_surface.sql pins the
-- core: names, argument names and types, result columns. Signatures are frozen.
begin;
select plan(9);

select has_table('jobs', 'limit', 'jobs.limit exists');
select has_table('jobs', 'lease', 'jobs.lease exists');
select set_eq(
  $$ select p.proname::text, pg_catalog.pg_get_function_identity_arguments(p.oid)
       from pg_catalog.pg_proc p
      where p.pronamespace = 'jobs'::regnamespace
        and p.proname = any (array['limit_put', 'limit_remove', 'limits', 'limit_stats',
                                   'lease_acquire', 'lease_renew', 'lease_release',
                                   'lease_holds', 'leases']) $$,
  $$ values
    ('limit_put', 'p_name text, p_def jsonb'),
    ('limit_remove', 'p_name text'),
    ('limits', ''),
    ('limit_stats', ''),
    ('lease_acquire', 'p_name text, p_holder text, p_ttl_s double precision'),
    ('lease_renew', 'p_name text, p_holder text, p_token bigint, p_ttl_s double precision'),
    ('lease_release', 'p_name text, p_holder text, p_token bigint'),
    ('lease_holds', 'p_name text, p_token bigint'),
    ('leases', '')
  $$,
  'flow-control functions keep their names and arguments');
select function_returns('jobs', 'limit_put', array['text', 'jsonb'], 'boolean');
select function_returns('jobs', 'lease_acquire', array['text', 'text', 'double precision'], 'bigint');
select function_returns('jobs', 'lease_renew', array['text', 'text', 'bigint', 'double precision'], 'boolean');
select is(pg_catalog.pg_get_function_result('jobs.limits()'::regprocedure),
          'TABLE(name text, scope text, target text, key_path text[], concurrency integer, rate_n integer, rate_per_s double precision, when_busy text, origin text, updated_at timestamp with time zone)',
          'limits returns these columns');
select is(pg_catalog.pg_get_function_result('jobs.limit_stats()'::regprocedure),
          'TABLE(limit_name text, grp text, concurrency integer, running bigint, waiting bigint, rate_n integer, rate_per_s double precision, recent_starts integer, deferred bigint)',
          'limit_stats returns these columns');
-- version 2: no token column (a lease's token is its holder's proof, sql/00_schema.sql)
select is(pg_catalog.pg_get_function_result('jobs.leases()'::regprocedure),
          'TABLE(name text, holder text, lease_expires_at timestamp with time zone, acquired_at timestamp with time zone, live boolean)',
          'leases returns these columns, and no token');

select * from finish();
rollback;
