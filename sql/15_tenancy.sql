-- Tenancy (docs/design/tenancy.md). A job's tenant is part of its key namespace (the
-- same key in two tenants is two jobs: sql/00_schema.sql), and a caller can be BOUND to
-- one tenant, so that every function it calls acts only within that tenant:
--   * by its login role, the security boundary: jobs.tenant_bind(role, tenant). A
--     session is bound when its login role (session_user) is that role or a member of
--     it. SET ROLE does not escape it (session_user stays), nor does resetting a
--     setting. A superuser is never bound by a role: it owns the boundary.
--   * by the setting sqljobs.tenant (PGOPTIONS='-c sqljobs.tenant=acme', or SET): any
--     session may set or reset it, so it keeps an application's requests apart, not a
--     hostile client. Under a role binding it may only repeat the role's tenant.
-- A bound caller's enqueue and stage stamp its tenant (naming another is refused);
-- claim takes only its tenant's jobs; a fenced call, an operator verb or a read naming
-- another tenant's job is refused; filters and listings narrow to its tenant; the
-- events it emits wake only its tenant's waiters; and the functions that act on every
-- tenant (schedules, relay, leases, limit and job-type writes, retention, queue pause,
-- fleet statistics) refuse it. Each refusal: tenant_refused (SJ018), nothing changed.

-- jobs.bound_tenant() -> the tenant this session is bound to, or null (unbound).
create or replace function jobs.bound_tenant()
returns text
language plpgsql
stable
set search_path = ''
as $$
declare
  v_setting text := nullif(pg_catalog.current_setting('sqljobs.tenant', true), '');
  v_role    text;
  v_count   bigint;
begin
  if exists (select from jobs.tenant_binding) then  -- (nothing bound: one empty read)
    select pg_catalog.min(b.tenant), pg_catalog.count(distinct b.tenant)
      into v_role, v_count
      from jobs.tenant_binding b
      join pg_catalog.pg_roles r on r.rolname = b.role_name
     where pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
       and not (select s.rolsuper from pg_catalog.pg_roles s where s.rolname = session_user);
    if v_count > 1 then
      perform jobs.raise_error('tenant_refused',
        pg_catalog.format('role %s is bound to %s tenants through its memberships', session_user,
                          v_count), null, 'bind each login role to one tenant');
    end if;
    if v_role is not null then
      if v_setting is not null and v_setting <> v_role then
        perform jobs.raise_error('tenant_refused',
          pg_catalog.format('sqljobs.tenant is %s, but role %s is bound to tenant %s',
                            v_setting, session_user, v_role));
      end if;
      return v_role;
    end if;
  end if;
  return v_setting;
end
$$;

comment on function jobs.bound_tenant() is
  'The tenant this session is bound to (by its login role, or the sqljobs.tenant setting), or null.';

-- jobs.fleet_only(fn): refuse a bound session the function fn, which acts on every tenant.
create or replace function jobs.fleet_only(p_fn text)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
begin
  if v_tenant is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('%s acts on every tenant; this session is bound to tenant %s',
                        p_fn, v_tenant),
      null, 'call it from a role bound to no tenant');
  end if;
end
$$;

-- jobs.check_tenant(ids): refuse a bound session any of these jobs of another tenant
-- (missing ids are left to the caller's own not-found answer).
create or replace function jobs.check_tenant(p_ids bigint[])
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
  v_id     bigint;
begin
  if v_tenant is null then
    return;
  end if;
  select j.id into v_id
    from jobs.job j
   where j.id = any (p_ids) and j.tenant is distinct from v_tenant
   order by j.id
   limit 1;
  if v_id is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('job %s is not of tenant %s, to which this session is bound',
                        v_id, v_tenant));
  end if;
end
$$;

-- jobs.foreign_tenant_spec(specs, tenant) -> the ordinal (from 1) of the first spec that
-- names a tenant other than p_tenant, or null (a spec naming none, or null, is fine).
create or replace function jobs.foreign_tenant_spec(p_specs jsonb, p_tenant text)
returns bigint
language sql
immutable
set search_path = ''
as $$
  select e.ord
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
   where pg_catalog.jsonb_typeof(e.spec->'tenant') is distinct from 'null'
     and e.spec->'tenant' <> pg_catalog.to_jsonb(p_tenant)
   order by e.ord
   limit 1
$$;

-- jobs.tenant_specs(specs) -> the specs, each given the bound tenant; a spec naming
-- another tenant is refused. Unbound: the specs as they are.
create or replace function jobs.tenant_specs(p_specs jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
  v_ord    bigint;
begin
  if v_tenant is null or pg_catalog.jsonb_typeof(p_specs) is distinct from 'array' then
    return p_specs;
  end if;
  v_ord := jobs.foreign_tenant_spec(p_specs, v_tenant);
  if v_ord is not null then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('spec %s: tenant %s is not %s, to which this session is bound', v_ord,
                        p_specs -> (v_ord - 1)::integer -> 'tenant', v_tenant));
  end if;
  return (select pg_catalog.jsonb_agg(
                   case when pg_catalog.jsonb_typeof(e.spec) = 'object'
                        then e.spec || pg_catalog.jsonb_build_object('tenant', v_tenant)
                        else e.spec end
                   order by e.ord)
            from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord));
end
$$;

-- jobs.check_tenant_policy(specs): refuse (tenant_policy, SJ022) the first spec whose
-- job type requires a tenant and names none, or forbids one and names one. Runs after
-- jobs.tenant_specs, so a bound session's specs always name its tenant. One read of
-- jobs.job_type when no type has a policy.
create or replace function jobs.check_tenant_policy(p_specs jsonb)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v_ord    bigint;
  v_name   text;
  v_policy text;
begin
  if not exists (select from jobs.job_type t where t.tenant_policy is not null) then
    return;
  end if;
  select e.ord, t.name, t.tenant_policy into v_ord, v_name, v_policy
    from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
    join jobs.job_type t on t.name = e.spec->>'name'
   where (t.tenant_policy = 'required' and nullif(e.spec->>'tenant', '') is null)
      or (t.tenant_policy = 'forbidden' and nullif(e.spec->>'tenant', '') is not null)
   order by e.ord
   limit 1;
  if v_ord is not null then
    perform jobs.raise_error('tenant_policy',
      pg_catalog.format('spec %s: job type %s %s', v_ord, v_name,
                        case v_policy when 'required' then 'requires a tenant and none was given'
                             else 'forbids a tenant and one was given' end),
      null, case v_policy when 'required' then 'enqueue it with a tenant'
                          else 'enqueue it without a tenant' end);
  end if;
end
$$;

comment on function jobs.check_tenant_policy(jsonb) is
  'Private: refuse a spec that breaks its job type''s tenant policy (SJ022).';

-- jobs.tenant_filter(filter) -> an operator or listing filter narrowed to the bound
-- tenant; one naming another tenant is refused. Unbound: the filter as it is.
create or replace function jobs.tenant_filter(p_filter jsonb)
returns jsonb
language plpgsql
stable
set search_path = ''
as $$
declare
  v_tenant text := jobs.bound_tenant();
begin
  if v_tenant is null or pg_catalog.jsonb_typeof(p_filter) is distinct from 'object' then
    return p_filter;
  end if;
  if p_filter->'tenant' is not null
     and p_filter->'tenant' not in (pg_catalog.to_jsonb(v_tenant),
                                    pg_catalog.jsonb_build_array(v_tenant)) then
    perform jobs.raise_error('tenant_refused',
      pg_catalog.format('filter.tenant %s is not %s, to which this session is bound',
                        p_filter->'tenant', v_tenant));
  end if;
  return p_filter || pg_catalog.jsonb_build_object('tenant', v_tenant);
end
$$;

-- ---------------------------------------------------------------------------
-- Bindings: kept by the schema owner or an unbound operator.
-- ---------------------------------------------------------------------------
-- jobs.tenant_bind(role, tenant) -> true when created, false when changed.
create or replace function jobs.tenant_bind(p_role text, p_tenant text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_created boolean;
begin
  perform jobs.fleet_only('jobs.tenant_bind');
  if p_role is null or not exists (select from pg_catalog.pg_roles r where r.rolname = p_role) then
    perform jobs.raise_error('invalid_argument', pg_catalog.format('no role is named %s', p_role));
  end if;
  perform jobs.check_name(p_tenant, 'tenant');  -- (the bound of a job's tenant)
  if (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = p_role) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('role %s is a superuser: a superuser is never bound', p_role));
  end if;
  insert into jobs.tenant_binding as b (role_name, tenant, updated_at)
  values (p_role, p_tenant, jobs.now())
  on conflict (role_name) do update set tenant = excluded.tenant, updated_at = excluded.updated_at
  returning (b.xmax::text = '0') into v_created;
  return v_created;
end
$$;

comment on function jobs.tenant_bind(text, text) is
  'Bind a role (and the login roles that are its members) to one tenant; true when created.';

-- jobs.tenant_unbind(role) -> true when a binding was removed.
create or replace function jobs.tenant_unbind(p_role text)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.tenant_unbind');
  delete from jobs.tenant_binding b where b.role_name = p_role;
  return found;
end
$$;

comment on function jobs.tenant_unbind(text) is 'Remove a role''s tenant binding; true when there was one.';

create or replace function jobs.tenant_bindings()
returns table (role_name text, tenant text, updated_at timestamptz)
language plpgsql
stable
set search_path = ''
as $$
begin
  perform jobs.fleet_only('jobs.tenant_bindings');
  return query select b.role_name, b.tenant, b.updated_at from jobs.tenant_binding b
                order by b.role_name;
end
$$;

comment on function jobs.tenant_bindings() is 'Every role bound to a tenant.';
