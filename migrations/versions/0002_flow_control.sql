-- sqljobs schema version 2 (flow control, and what operating it needs): upgrades
-- version 1 in place. Revision sqljobs_0002. The source of every function below is
-- sql/: new are sql/35_limits.sql (limits; docs/design/limits.md says why it is built
-- this way), 92_introspection.sql (job types, redaction, job_view), 93_metrics.sql
-- (gauges, stats) and 95_retention.sql (purge); 20_enqueue.sql, 30_claim.sql,
-- 40_settle.sql, 80_schedule.sql and 90_operator.sql changed.
--
-- Locks: jobs.job takes an ACCESS EXCLUSIVE lock for the new columns (no rewrite: their
-- defaults are constants) and the index swap; the new partial indexes cover columns
-- that are empty before this revision, and the rebuilt job_claimable_idx only the
-- claimable rows, so the lock lasts about as long as reading those; job_retention_idx
-- covers the finished rows kept (about a second per million). Workers of
-- version 1 need not drain: they keep calling the same functions (jobs.leader_* are
-- kept as wrappers over the named leases).

-- ---------------------------------------------------------------------------
-- jobs.job: the spec fields of debounce, singleton and throttle, and the engine's
-- slots (the limit groups a running job holds), blocked_on and deferred_by.
-- ---------------------------------------------------------------------------
alter table jobs.job
  add column group_key      text,
  add column singleton      boolean not null default false,
  add column debounce_s     double precision,
  add column throttle_n     integer,
  add column throttle_per_s double precision,
  add column slots          text[],
  add column blocked_on     text,
  add column deferred_by    text;

-- The spec record is rebuilt once, its fields in column order (jobs.define_spec below
-- makes it again, and the functions that read it).
drop type jobs.job_spec;

-- A job waiting for a limit's slot is not claimable.
drop index jobs.job_claimable_idx;
create index job_claimable_idx
  on jobs.job (queue, priority, run_at, id)
  where state in ('ready', 'interrupted') and blocked_on is null;
create index job_blocked_idx
  on jobs.job (blocked_on, priority, run_at, id)
  where blocked_on is not null and state in ('ready', 'interrupted');
create index job_deferred_idx
  on jobs.job (deferred_by)
  where deferred_by is not null and state in ('ready', 'interrupted');
create unique index job_singleton_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where singleton and state in ('ready', 'running', 'parked', 'interrupted');
create unique index job_debounce_idx
  on jobs.job (name, (coalesce(tenant, '')), (coalesce(group_key, '')))
  where debounce_s is not null and state = 'ready';
-- Dead jobs per queue (jobs.queue_gauges in sql/93_metrics.sql): unlike the indexes
-- above it holds rows from the start (the dead jobs kept), one more read of the table.
create index job_dead_idx
  on jobs.job (queue)
  where state = 'dead';

-- ---------------------------------------------------------------------------
-- jobs.leader becomes jobs.lease, the named leases (the scheduler's is 'scheduler':
-- a leader's token carries over).
-- ---------------------------------------------------------------------------
alter table jobs.leader rename to lease;
alter table jobs.lease rename column role to name;
alter table jobs.lease rename constraint leader_pkey to lease_pkey;
-- PostgreSQL 18 names NOT NULL constraints too (leader_role_not_null, ...): renamed
-- as a fresh install names them.
do $$
declare
  c record;
begin
  for c in select conname from pg_catalog.pg_constraint
            where conrelid = 'jobs.lease'::regclass and contype = 'n' and conname like 'leader\_%'
  loop
    execute pg_catalog.format('alter table jobs.lease rename constraint %I to %I', c.conname,
      pg_catalog.replace(pg_catalog.replace(c.conname, 'leader_role_', 'lease_name_'),
                         'leader_', 'lease_'));
  end loop;
end
$$;

-- ---------------------------------------------------------------------------
-- jobs.limit, jobs.slot and jobs.limit_start (sql/00_schema.sql says what each holds).
-- ---------------------------------------------------------------------------
create table jobs.limit (
  name         text primary key,
  scope        text not null,
  target       text,
  key_path     text[],
  concurrency  integer,
  rate_n       integer,
  rate_per_s   double precision,
  when_busy    text not null default 'wait',
  origin       text not null default 'api',
  updated_at   timestamptz not null
);
create table jobs.slot (
  grp     text not null,
  job_id  bigint not null,
  primary key (grp, job_id)
);
create table jobs.limit_start (
  grp     text primary key,
  starts  timestamptz[] not null
);

-- ---------------------------------------------------------------------------
-- Retention (sql/95_retention.sql): the stored policy, and the index jobs.purge sweeps.
-- ---------------------------------------------------------------------------
create table jobs.retention (
  queue        text primary key,
  succeeded_s  double precision,
  failed_s     double precision,
  dead_s       double precision,
  cancelled_s  double precision,
  awaited_s    double precision,
  events_s     double precision,
  updated_at   timestamptz not null
);
create index job_retention_idx
  on jobs.job (state, finished_at)
  where finished_at is not null;

-- jobs.job_type: job types and the payload paths views redact (sql/92_introspection.sql).
create table jobs.job_type (
  name             text primary key,
  queue            text,
  sensitive_paths  text[] not null default '{}',
  personal_paths   text[] not null default '{}',
  payload_schema   jsonb,
  retry            jsonb,
  timeout_s        double precision,
  origin           text not null default 'api',
  updated_at       timestamptz not null
);

-- jobs.queue_stats gains a column (limited): a new return type is a drop and a create.
drop function jobs.queue_stats();

-- ---------------------------------------------------------------------------
-- Functions: new ones, then changed ones.
-- ---------------------------------------------------------------------------
-- new: jobs.admit(bigint[],integer,timestamp with time zone)
CREATE OR REPLACE FUNCTION jobs.admit(p_ids bigint[], p_limit integer, p_now timestamp with time zone)
 RETURNS TABLE(id bigint, slots text[], at timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path TO ''
 SET enable_bitmapscan TO 'off'
AS $function$
declare
  -- every (candidate, group) pair, in candidate order (a candidate's pairs together,
  -- its global and queue groups last), as parallel arrays
  a_id     bigint[];
  a_group  text[];
  a_cap    integer[];       -- concurrency (null: none)
  a_n      integer[];       -- rate: starts ...
  a_per    double precision[];  -- ... per seconds (null: no rate)
  a_fail   boolean[];       -- when_busy = 'fail'
  a_all    boolean[];       -- a global or queue limit's group
  a_pos    integer[];       -- the group's place in v_names
  v_names  text[];          -- every group of the candidates, sorted (the lock order)
  v_used   integer[];       -- per group: running (then + admitted)
  v_waits  integer[];       -- per group: jobs deferred by its rate so far (null: not read)
  v_starts jsonb := '{}';   -- rate group -> recent starts, oldest first (+ admitted)
  v_now    timestamptz := p_now;
  v_k      integer := 1;    -- the pair at hand
  v_first  integer;         -- the candidate's first pair
  v_last   integer;
  v_cid    bigint;
  v_p      integer;
  v_i      integer;
  v_taken  integer := 0;
  v_refusal text;           -- null (admitted) | block | leave | defer | fail
  v_group  text;
  v_until  timestamptz;
  v_at     timestamptz;
  v_ring   jsonb;
  v_w      integer;
  v_slots  text[];
  v_blocked  bigint[] := '{}';
  v_block_on text[] := '{}';
  v_defer    bigint[] := '{}';
  v_defer_at timestamptz[] := '{}';
  v_defer_on text[] := '{}';
  v_defer_group text;      -- the rate group that defers the longest
  v_fail     bigint[] := '{}';
  v_fail_on  text[] := '{}';
begin
  -- GROUPS of every candidate, from the limits that apply to it.
  select pg_catalog.array_agg(g.id), pg_catalog.array_agg(g.grp), pg_catalog.array_agg(g.cap),
         pg_catalog.array_agg(g.n), pg_catalog.array_agg(g.per), pg_catalog.array_agg(g.fail),
         pg_catalog.array_agg(g.all_jobs)
    into a_id, a_group, a_cap, a_n, a_per, a_fail, a_all
    from (select x.id, x.grp, x.cap, x.n, x.per, x.fail, x.all_jobs from (
            select c.ord, j.id,
                   l.name || '|' || case
                     when l.scope = 'key' then coalesce(j.payload #>> l.key_path, '')
                     when l.scope = 'tenant' and l.target is null then j.tenant
                     else '' end as grp,
                   l.concurrency as cap, l.rate_n as n, l.rate_per_s as per,
                   l.when_busy = 'fail' as fail, l.scope in ('global', 'queue') as all_jobs
              from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
              join jobs.job j on j.id = c.id
              join jobs.limit l
                on l.scope = 'global'
                or (l.scope = 'queue' and l.target = j.queue)
                or ((l.scope = 'name' or l.scope = 'key') and l.target = j.name)
                or (l.scope = 'tenant' and j.tenant is not null
                    and (l.target is null or l.target = j.tenant))
            union all
            select c.ord, j.id,
                   'sqljobs.throttle|' || j.name || '|' || coalesce(j.tenant, '') || '|'
                     || coalesce(j.group_key, ''),
                   null, j.throttle_n, j.throttle_per_s, false, false
              from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
              join jobs.job j on j.id = c.id
             where j.throttle_n is not null) x
          -- one sort feeds every aggregate (each array in this order)
          order by x.ord, x.all_jobs, x.grp) g;

  if a_id is null then  -- no limit applies to any candidate
    return query select c.id, null::text[], p_now
                   from pg_catalog.unnest(p_ids) with ordinality as c(id, ord)
                  order by c.ord limit p_limit;
    return;
  end if;

  -- LOCK ACQUISITION: one advisory lock per group, in group order.
  v_names := array(select distinct g from pg_catalog.unnest(a_group) g order by 1);
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('sqljobs.limit|' || g, 0))
     from pg_catalog.unnest(v_names) as g
    order by g;
  a_pos := array(select pg_catalog.array_position(v_names, g)
                   from pg_catalog.unnest(a_group) with ordinality as x(g, o) order by x.o);

  -- The admission's time, read once the locks are held: the claims of a group are
  -- admitted in lock order, so their starts (the rate windows, each job's started_at)
  -- are in that order too. A session's jobs.fake_now (tests) stands in for it.
  if nullif(pg_catalog.current_setting('jobs.fake_now', true), '') is null then
    v_now := pg_catalog.clock_timestamp();
  end if;

  -- USE: the running jobs holding each group (jobs.slot); recent starts.
  select pg_catalog.array_agg(coalesce(u.n, 0) order by g.o)
    into v_used
    from pg_catalog.unnest(v_names) with ordinality as g(name, o)
    left join (select s.grp, pg_catalog.count(*)::integer as n
                 from jobs.slot s
                where s.grp = any (v_names)
                group by s.grp) u on u.grp = g.name;
  if exists (select from pg_catalog.unnest(a_n) n where n is not null) then
    select coalesce(pg_catalog.jsonb_object_agg(t.grp, pg_catalog.to_jsonb(t.starts)), '{}')
      into v_starts
      from jobs.limit_start t
     where t.grp = any (v_names);
  end if;
  v_waits := pg_catalog.array_fill(null::integer, array[pg_catalog.cardinality(v_names)]);

  -- ADMIT in claim order while every group has room.
  foreach v_cid in array p_ids loop
    exit when v_taken >= p_limit;
    v_first := v_k;
    while v_k <= pg_catalog.cardinality(a_id) and a_id[v_k] = v_cid loop
      v_k := v_k + 1;
    end loop;
    v_last := v_k - 1;
    v_refusal := null;
    -- concurrency first: a full group blocks (or fails); a full global or queue group
    -- (listed last) leaves the job as it is; then the rates
    for v_i in v_first .. v_last loop
      v_p := a_pos[v_i];
      if a_cap[v_i] is not null and v_used[v_p] >= a_cap[v_i] then
        v_group := a_group[v_i];
        if a_all[v_i] then
          v_refusal := 'leave';
        elsif a_fail[v_i] and exists (
                select from jobs.slot s join jobs.job r on r.id = s.job_id
                 where s.grp = v_group and r.state = 'running' and r.lease_expires_at > v_now)
        then
          v_refusal := 'fail';  -- evidence: a run holds the key under a live lease
        else
          v_refusal := 'block';
        end if;
        exit;
      end if;
    end loop;
    if v_refusal is null then
      v_until := null;
      for v_i in v_first .. v_last loop
        continue when a_n[v_i] is null;
        v_group := a_group[v_i];
        v_ring := coalesce(v_starts->v_group, '[]');
        if pg_catalog.jsonb_array_length(v_ring) >= a_n[v_i]
           and (v_ring->>(pg_catalog.jsonb_array_length(v_ring) - a_n[v_i]))::timestamptz
               > v_now - pg_catalog.make_interval(secs => a_per[v_i]) then
          -- the window is full: the k-th job deferred (counting those an earlier claim
          -- deferred, still waiting) starts when the k-th of the recent starts leaves
          -- the window
          v_p := a_pos[v_i];
          if v_waits[v_p] is null then
            select pg_catalog.count(*) into v_w from jobs.job d
             where d.deferred_by = v_group and d.state in ('ready', 'interrupted')
               and d.run_at > v_now;
            v_waits[v_p] := v_w;
          end if;
          v_w := v_waits[v_p];
          v_waits[v_p] := v_w + 1;
          v_at := (v_ring->>(pg_catalog.jsonb_array_length(v_ring) - a_n[v_i]
                             + v_w % a_n[v_i]))::timestamptz
                  + pg_catalog.make_interval(secs => a_per[v_i] * (v_w / a_n[v_i] + 1));
          if v_until is null or v_at > v_until then
            v_until := v_at;
            v_defer_group := v_group;
          end if;
          v_refusal := 'defer';
        end if;
      end loop;
    end if;
    if v_refusal = 'block' then
      v_blocked := v_blocked || v_cid;
      v_block_on := v_block_on || v_group;
    elsif v_refusal = 'fail' then
      v_fail := v_fail || v_cid;
      v_fail_on := v_fail_on || v_group;
    elsif v_refusal = 'defer' then
      v_defer := v_defer || v_cid;
      v_defer_at := v_defer_at || v_until;
      v_defer_on := v_defer_on || v_defer_group;
    elsif v_refusal is null then
      -- TAKE: a slot of each concurrency group, a start of each rate group
      v_slots := null;
      for v_i in v_first .. v_last loop
        v_p := a_pos[v_i];
        if a_cap[v_i] is not null then
          v_used[v_p] := v_used[v_p] + 1;
          v_slots := v_slots || a_group[v_i];
        end if;
        if a_n[v_i] is not null then
          v_ring := coalesce(v_starts->a_group[v_i], '[]') || pg_catalog.to_jsonb(v_now);
          if pg_catalog.jsonb_array_length(v_ring) > a_n[v_i] then
            v_ring := v_ring - 0;
          end if;
          v_starts := v_starts || pg_catalog.jsonb_build_object(a_group[v_i], v_ring);
        end if;
      end loop;
      id := v_cid;
      slots := v_slots;
      at := v_now;
      v_taken := v_taken + 1;
      return next;
    end if;
  end loop;

  -- APPLY the refusals and the new starts.
  if pg_catalog.cardinality(v_blocked) > 0 then
    update jobs.job as j set blocked_on = b.grp
      from unnest(v_blocked, v_block_on) as b(id, grp)
     where j.id = b.id;
    -- ROOM LEFT: a group that still has free slots after this admission may have jobs
    -- waiting on it (a waiter woken for its slot and blocked again on another of its
    -- groups left that slot unused): make as many of them claimable as it has room.
    -- Only a claim that blocked a job can have left such a slot.
    perform jobs.unblock(array(
      select w.id
        from (select distinct a_group[x.i] as grp, a_cap[x.i] as cap, v_used[a_pos[x.i]] as used
                from pg_catalog.generate_subscripts(a_group, 1) as x(i)
               where a_cap[x.i] > v_used[a_pos[x.i]]) g
       cross join lateral (
         select b.id from jobs.job b
          where b.blocked_on = g.grp and b.state in ('ready', 'interrupted')
          order by b.priority, b.run_at, b.id
          limit g.cap - g.used
            for update skip locked) w));
  end if;
  if pg_catalog.cardinality(v_defer) > 0 then
    update jobs.job as j set run_at = d.at, deferred_by = d.grp
      from unnest(v_defer, v_defer_at, v_defer_on) as d(id, at, grp)
     where j.id = d.id;
  end if;
  if pg_catalog.cardinality(v_fail) > 0 then
    update jobs.job as j
       set state = 'failed', finished_at = v_now,
           last_error = pg_catalog.jsonb_build_object(
             'kind', 'key_busy', 'sqlstate', 'SJ012',
             'message', pg_catalog.format(
               'another run holds key %L of limit %L, and the job says when_busy = fail',
               pg_catalog.substr(f.grp, pg_catalog.strpos(f.grp, '|') + 1),
               pg_catalog.split_part(f.grp, '|', 1)),
             'at', v_now)
      from unnest(v_fail, v_fail_on) as f(id, grp)
     where j.id = f.id;
  end if;
  -- MORE: refused jobs left the claimable ones (blocked, deferred or failed); when this
  -- claim took fewer than it was asked for, others may be claimable now: wake the
  -- claimers of those queues (this one included) to claim again.
  if v_taken < p_limit and pg_catalog.cardinality(v_blocked || v_defer || v_fail) > 0 then
    perform jobs.wake(array(select distinct j.queue from jobs.job j
                             where j.id = any (v_blocked || v_defer || v_fail)));
  end if;
  if v_starts <> '{}' then
    insert into jobs.limit_start as t (grp, starts)
    select s.key, array(select pg_catalog.jsonb_array_elements_text(s.value)::timestamptz)
      from pg_catalog.jsonb_each(v_starts) as s
    on conflict (grp) do update set starts = excluded.starts
     where t.starts is distinct from excluded.starts;
  end if;
end
$function$;

-- new: jobs.check_lease_args(text,text,double precision)
CREATE OR REPLACE FUNCTION jobs.check_lease_args(p_name text, p_holder text, p_ttl_s double precision)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  if p_name is null or p_name = '' or pg_catalog.length(p_name) > 200
     or p_holder is null or p_holder = '' then
    perform jobs.raise_error('invalid_argument',
      'a lease needs a name (at most 200 characters) and a holder');
  end if;
  if p_ttl_s is null or not (p_ttl_s > 0 and p_ttl_s < 'Infinity'::double precision) then
    perform jobs.raise_error('invalid_argument', 'ttl_s must be positive and finite');
  end if;
end
$function$;

-- new: jobs.debounce(jsonb,timestamp with time zone)
CREATE OR REPLACE FUNCTION jobs.debounce(p_spec jsonb, p_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_id bigint;
begin
  update jobs.job as k
     set payload = coalesce(nullif(p_spec->'payload', 'null'), '{}'),
         run_at = p_now + pg_catalog.make_interval(secs => (p_spec->>'debounce_s')::double precision)
   where k.name = p_spec->>'name'
     and coalesce(k.tenant, '') = coalesce(p_spec->>'tenant', '')
     and coalesce(k.group_key, '') = coalesce(p_spec->>'group_key', '')
     and k.debounce_s is not null and k.state = 'ready'
  returning k.id into v_id;
  return v_id;
end
$function$;

-- new: jobs.job_detail(bigint)
CREATE OR REPLACE FUNCTION jobs.job_detail(p_id bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select pg_catalog.jsonb_build_object(
    'job', pg_catalog.to_jsonb(v),
    'steps', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'name', st.name, 'ordinal', st.ordinal, 'kind', st.kind,
               'value', jobs.redact_strings(st.value, s.secrets), 'created_at', st.created_at)
             order by st.ordinal)
        from jobs.step st where st.job_id = j.id), '[]'::jsonb),
    'children', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'id', c.id, 'name', c.name, 'state', c.state, 'parent_step', c.parent_step,
               'attempt', c.attempt, 'finished_at', c.finished_at) order by c.id)
        from jobs.job c where c.parent_id = j.id), '[]'::jsonb),
    'waits', coalesce((
      select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'step', w.step, 'events', w.names, 'specs', jobs.redact_strings(w.specs, s.secrets),
               'deadline', w.deadline, 'created_at', w.created_at) order by w.created_at, w.step)
        from jobs.event_wait w where w.job_id = j.id), '[]'::jsonb))
    from jobs.job j
    join jobs.job_view v on v.id = j.id
    left join jobs.job_type t on t.name = j.name
   cross join lateral (select jobs.redaction_secrets(j.payload, t.sensitive_paths) as secrets) s
   where j.id = p_id);
end
$function$;

-- new: jobs.job_of_group(jsonb)
CREATE OR REPLACE FUNCTION jobs.job_of_group(p_spec jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
begin
  return (select k.id from jobs.job k
           where k.name = p_spec->>'name'
             and coalesce(k.tenant, '') = coalesce(p_spec->>'tenant', '')
             and coalesce(k.group_key, '') = coalesce(p_spec->>'group_key', '')
             and ((k.singleton and (p_spec->>'singleton')::boolean
                   and k.state in ('ready', 'running', 'parked', 'interrupted'))
                  or (k.debounce_s is not null and p_spec->>'debounce_s' is not null
                      and k.state = 'ready'))
           limit 1);
end
$function$;

-- new: jobs.job_type_problem(text,jsonb)
CREATE OR REPLACE FUNCTION jobs.job_type_problem(p_name text, p_def jsonb)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_field   text;
  v_problem text;
begin
  if p_name is null or p_name = '' then
    return 'a job type needs a name';
  end if;
  if p_def is null or pg_catalog.jsonb_typeof(p_def) <> 'object' then
    return 'a job type definition is a JSON object';
  end if;
  select k into v_field from pg_catalog.jsonb_object_keys(p_def) k
   where k not in ('queue', 'sensitive', 'personal', 'payload_schema', 'retry', 'timeout_s',
                   'origin')
   limit 1;
  if v_field is not null then
    return pg_catalog.format('unknown field %L (fields: queue, sensitive, personal, '
                             'payload_schema, retry, timeout_s, origin)', v_field);
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'queue'), 'string') not in ('string', 'null') then
    return 'queue must be a string';
  end if;
  foreach v_field in array array['sensitive', 'personal'] loop
    if coalesce(pg_catalog.jsonb_typeof(p_def->v_field), 'array') <> 'array' then
      return pg_catalog.format('%s must be an array of paths', v_field);
    end if;
    if exists (select 1 from pg_catalog.jsonb_array_elements(coalesce(p_def->v_field, '[]')) e
                where pg_catalog.jsonb_typeof(e) <> 'string') then
      return pg_catalog.format('%s must hold strings', v_field);
    end if;
    select jobs.redaction_path_problem(e) into v_problem
      from pg_catalog.jsonb_array_elements_text(coalesce(p_def->v_field, '[]')) e
     where jobs.redaction_path_problem(e) is not null
     limit 1;
    if v_problem is not null then
      return pg_catalog.format('%s: %s', v_field, v_problem);
    end if;
  end loop;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'payload_schema'), 'object') not in ('object', 'null')
     or coalesce(pg_catalog.jsonb_typeof(p_def->'retry'), 'object') not in ('object', 'null') then
    return 'payload_schema and retry must be JSON objects';
  end if;
  if coalesce(pg_catalog.jsonb_typeof(p_def->'timeout_s'), 'number') not in ('number', 'null')
     or (p_def->>'timeout_s')::double precision <= 0 then
    return 'timeout_s must be a positive number';
  end if;
  if coalesce(p_def->>'origin', 'api') not in ('declared', 'api') then
    return 'origin must be declared or api';
  end if;
  return null;
end
$function$;

-- new: jobs.job_type_put(text,jsonb)
CREATE OR REPLACE FUNCTION jobs.job_type_put(p_name text, p_def jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_problem text := jobs.job_type_problem(p_name, p_def);
  v_new     boolean;
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_job_type', v_problem);
  end if;
  insert into jobs.job_type as t (name, queue, sensitive_paths, personal_paths, payload_schema,
                                  retry, timeout_s, origin, updated_at)
  values (p_name, p_def->>'queue',
          array(select distinct e from pg_catalog.jsonb_array_elements_text(
                  coalesce(p_def->'sensitive', '[]')) e order by e),
          array(select distinct e from pg_catalog.jsonb_array_elements_text(
                  coalesce(p_def->'personal', '[]')) e order by e),
          pg_catalog.jsonb_strip_nulls(p_def)->'payload_schema',
          pg_catalog.jsonb_strip_nulls(p_def)->'retry',
          (p_def->>'timeout_s')::double precision, coalesce(p_def->>'origin', 'api'), jobs.now())
  on conflict (name) do update
     set queue = excluded.queue, sensitive_paths = excluded.sensitive_paths,
         personal_paths = excluded.personal_paths, payload_schema = excluded.payload_schema,
         retry = excluded.retry, timeout_s = excluded.timeout_s, origin = excluded.origin,
         updated_at = excluded.updated_at
  returning (xmax = 0) into v_new;
  return v_new;
end
$function$;

-- new: jobs.job_type_remove(text)
CREATE OR REPLACE FUNCTION jobs.job_type_remove(p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  delete from jobs.job_type t where t.name = p_name;
  if not found then
    perform jobs.raise_error('job_type_not_found', pg_catalog.format('no job type named %L', p_name));
  end if;
end
$function$;

-- new: jobs.job_types()
CREATE OR REPLACE FUNCTION jobs.job_types()
 RETURNS TABLE(name text, queue text, sensitive_paths text[], personal_paths text[], payload_schema jsonb, retry jsonb, timeout_s double precision, origin text, updated_at timestamp with time zone)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select t.name, t.queue, t.sensitive_paths, t.personal_paths, t.payload_schema, t.retry,
         t.timeout_s, t.origin, t.updated_at
    from jobs.job_type t
   order by t.name
$function$;

-- new: jobs.lease_acquire(text,text,double precision)
CREATE OR REPLACE FUNCTION jobs.lease_acquire(p_name text, p_holder text, p_ttl_s double precision)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_now   timestamptz := jobs.now();
  v_token bigint;
begin
  perform jobs.check_lease_args(p_name, p_holder, p_ttl_s);
  insert into jobs.lease as l (name, holder, token, lease_expires_at, acquired_at)
  values (p_name, p_holder, 1, v_now + pg_catalog.make_interval(secs => p_ttl_s), v_now)
  on conflict (name) do update
     set holder = excluded.holder,
         token = case when l.holder = excluded.holder then l.token else l.token + 1 end,
         acquired_at = case when l.holder = excluded.holder then l.acquired_at
                            else excluded.acquired_at end,
         lease_expires_at = excluded.lease_expires_at
   where l.holder = excluded.holder or l.holder is null or l.lease_expires_at <= v_now
  returning l.token into v_token;
  return v_token;
end
$function$;

-- new: jobs.lease_holds(text,bigint)
CREATE OR REPLACE FUNCTION jobs.lease_holds(p_name text, p_token bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  return coalesce((select l.holder is not null and l.lease_expires_at > jobs.now()
                          and l.token = p_token
                     from jobs.lease l
                    where l.name = p_name
                      for share), false);
end
$function$;

-- new: jobs.lease_release(text,text,bigint)
CREATE OR REPLACE FUNCTION jobs.lease_release(p_name text, p_holder text, p_token bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  update jobs.lease as l
     set holder = null, lease_expires_at = null
   where l.name = p_name and l.holder = p_holder and l.token = p_token;
  return found;
end
$function$;

-- new: jobs.lease_renew(text,text,bigint,double precision)
CREATE OR REPLACE FUNCTION jobs.lease_renew(p_name text, p_holder text, p_token bigint, p_ttl_s double precision)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  perform jobs.check_lease_args(p_name, p_holder, p_ttl_s);
  update jobs.lease as l
     set lease_expires_at = jobs.now() + pg_catalog.make_interval(secs => p_ttl_s)
   where l.name = p_name and l.holder = p_holder and l.token = p_token;
  return found;
end
$function$;

-- new: jobs.leases()
CREATE OR REPLACE FUNCTION jobs.leases()
 RETURNS TABLE(name text, holder text, token bigint, lease_expires_at timestamp with time zone, acquired_at timestamp with time zone, live boolean)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select l.name, l.holder, l.token, l.lease_expires_at, l.acquired_at,
         l.holder is not null and l.lease_expires_at > jobs.now()
    from jobs.lease l
   order by l.name
$function$;

-- new: jobs.limit_gauges()
CREATE OR REPLACE FUNCTION jobs.limit_gauges()
 RETURNS TABLE(limit_name text, groups bigint, running bigint, concurrency integer, waiting bigint, deferred bigint, recent_starts bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return query
  with used as (
    select s.limit_name, pg_catalog.count(*) as groups, pg_catalog.sum(s.running) as running,
           pg_catalog.sum(s.waiting) as waiting, pg_catalog.sum(s.deferred) as deferred,
           pg_catalog.sum(s.recent_starts) as recent_starts
      from jobs.limit_stats() s
     group by s.limit_name
  ),
  names as (
    select u.limit_name from used u union select l.name from jobs.limit l
  )
  select n.limit_name, coalesce(u.groups, 0), coalesce(u.running, 0)::bigint, l.concurrency,
         coalesce(u.waiting, 0)::bigint, coalesce(u.deferred, 0)::bigint,
         coalesce(u.recent_starts, 0)::bigint
    from names n
    left join used u on u.limit_name = n.limit_name
    left join jobs.limit l on l.name = n.limit_name
   order by n.limit_name;
end
$function$;

-- new: jobs.limit_problem(text,jsonb)
CREATE OR REPLACE FUNCTION jobs.limit_problem(p_name text, p_def jsonb)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_scope text := p_def->>'scope';
begin
  if p_name is null or p_name = '' or pg_catalog.length(p_name) > 200 or p_name like '%|%' then
    return 'a limit name is 1 to 200 characters, without |';
  end if;
  if p_name like 'sqljobs.%' then
    return 'limit names starting with sqljobs. are the engine''s own';
  end if;
  if p_def is null or pg_catalog.jsonb_typeof(p_def) <> 'object' then
    return 'a limit is a JSON object';
  end if;
  if p_def - array['scope', 'target', 'key', 'concurrency', 'rate', 'when_busy', 'origin'] <> '{}' then
    return pg_catalog.format('unknown field %L (a limit takes scope, target, key, concurrency, '
                             'rate, when_busy, origin)',
      (select k from pg_catalog.jsonb_object_keys(
         p_def - array['scope', 'target', 'key', 'concurrency', 'rate', 'when_busy', 'origin']) k
        limit 1));
  end if;
  if v_scope is null or v_scope not in ('global', 'queue', 'name', 'tenant', 'key') then
    return 'scope must be global, queue, name, tenant or key';
  end if;
  if pg_catalog.jsonb_typeof(p_def->'target') not in ('string', 'null') or p_def->>'target' = '' then
    return 'target must be a non-empty string';
  end if;
  if v_scope in ('queue', 'name', 'key') and p_def->>'target' is null then
    return pg_catalog.format('a %s limit needs a target (the %s)', v_scope,
                             case v_scope when 'queue' then 'queue' else 'job name' end);
  end if;
  if v_scope = 'global' and p_def->>'target' is not null then
    return 'a global limit takes no target';
  end if;
  if (v_scope = 'key') <> (p_def ? 'key') then
    return 'a key limit, and only it, needs key: the payload field (a name, or a path as a list of names)';
  end if;
  if v_scope = 'key' and not (
       (pg_catalog.jsonb_typeof(p_def->'key') = 'string' and p_def->>'key' <> '')
       or (pg_catalog.jsonb_typeof(p_def->'key') = 'array'
           and pg_catalog.jsonb_array_length(p_def->'key') between 1 and 10
           and not p_def->'key' @? '$[*] ? (@.type() != "string" || @ == "")')) then
    return 'key must be a payload field name, or a path as a list of names';
  end if;
  if not (p_def ? 'concurrency' or p_def ? 'rate') then
    return 'a limit needs concurrency, rate, or both';
  end if;
  if p_def ? 'concurrency' and not (pg_catalog.jsonb_typeof(p_def->'concurrency') = 'number'
       and (p_def->'concurrency')::numeric % 1 = 0
       and (p_def->'concurrency')::numeric between 1 and 1000000) then
    return 'concurrency must be a whole number from 1 to 1000000';
  end if;
  if p_def ? 'rate' and not (pg_catalog.jsonb_typeof(p_def->'rate') = 'object'
       and (p_def->'rate') - array['n', 'per_s'] = '{}'
       and pg_catalog.jsonb_typeof(p_def->'rate'->'n') = 'number'
       and (p_def->'rate'->'n')::numeric % 1 = 0
       and (p_def->'rate'->'n')::numeric between 1 and 100000
       and pg_catalog.jsonb_typeof(p_def->'rate'->'per_s') = 'number'
       and (p_def->'rate'->'per_s')::numeric > 0
       and (p_def->'rate'->'per_s')::numeric <= 31536000) then
    return 'rate must be {"n": starts (1 to 100000), "per_s": seconds (more than 0, at most a year)}';
  end if;
  if p_def ? 'when_busy' and (p_def->>'when_busy' is null
                              or p_def->>'when_busy' not in ('wait', 'fail')) then
    return 'when_busy must be wait or fail';
  end if;
  if p_def->>'when_busy' = 'fail' and (v_scope <> 'key' or not p_def ? 'concurrency') then
    return 'when_busy fail is for a key limit with concurrency';
  end if;
  if p_def ? 'origin' and (p_def->>'origin' is null or p_def->>'origin' not in ('declared', 'api')) then
    return 'origin must be declared or api';
  end if;
  return null;
end
$function$;

-- new: jobs.limit_put(text,jsonb)
CREATE OR REPLACE FUNCTION jobs.limit_put(p_name text, p_def jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_problem text := jobs.limit_problem(p_name, p_def);
  v_new     boolean;
begin
  if v_problem is not null then
    perform jobs.raise_error('invalid_argument', v_problem);
  end if;
  insert into jobs.limit as l (name, scope, target, key_path, concurrency, rate_n, rate_per_s,
                               when_busy, origin, updated_at)
  values (p_name, p_def->>'scope', p_def->>'target',
          case pg_catalog.jsonb_typeof(p_def->'key')
            when 'string' then array[p_def->>'key']
            when 'array' then array(select pg_catalog.jsonb_array_elements_text(p_def->'key'))
          end,
          (p_def->>'concurrency')::integer, (p_def->'rate'->>'n')::integer,
          (p_def->'rate'->>'per_s')::double precision,
          coalesce(p_def->>'when_busy', 'wait'), coalesce(p_def->>'origin', 'api'), jobs.now())
  on conflict (name) do update
     set scope = excluded.scope, target = excluded.target, key_path = excluded.key_path,
         concurrency = excluded.concurrency, rate_n = excluded.rate_n,
         rate_per_s = excluded.rate_per_s, when_busy = excluded.when_busy,
         origin = excluded.origin, updated_at = excluded.updated_at
  returning (xmax = 0) into v_new;
  return v_new;
end
$function$;

-- new: jobs.limit_remove(text)
CREATE OR REPLACE FUNCTION jobs.limit_remove(p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  delete from jobs.limit l where l.name = p_name;
  if not found then
    perform jobs.raise_error('limit_not_found', pg_catalog.format('no limit named %L', p_name));
  end if;
  perform jobs.unblock(array(
    select b.id from jobs.job b
     where pg_catalog.split_part(b.blocked_on, '|', 1) = p_name
       and b.state in ('ready', 'interrupted')));
end
$function$;

-- new: jobs.limit_stats()
CREATE OR REPLACE FUNCTION jobs.limit_stats()
 RETURNS TABLE(limit_name text, grp text, concurrency integer, running bigint, waiting bigint, rate_n integer, rate_per_s double precision, recent_starts integer, deferred bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  with used as (
    select s.grp, pg_catalog.count(*) as running from jobs.slot s group by s.grp
  ), waiting as (
    select b.blocked_on as grp, pg_catalog.count(*) as waiting
      from jobs.job b
     where b.blocked_on is not null and b.state in ('ready', 'interrupted')
     group by b.blocked_on
  ), deferred as (
    select d.deferred_by as grp, pg_catalog.count(*) as deferred
      from jobs.job d
     where d.deferred_by is not null and d.state in ('ready', 'interrupted')
       and d.run_at > jobs.now()
     group by d.deferred_by
  ), held as (  -- a full global or queue limit holds back the runnable jobs of its scope
    select l.name || '|' as grp,
           (select pg_catalog.count(*) from jobs.job h
             where h.state in ('ready', 'interrupted') and h.blocked_on is null
               and h.run_at <= jobs.now() and (l.scope = 'global' or h.queue = l.target)) as n
      from jobs.limit l join used u on u.grp = l.name || '|'
     where l.scope in ('global', 'queue') and u.running >= l.concurrency
  ), starts as (
    select t.grp, t.starts from jobs.limit_start t
  ), groups as (
    select u.grp from used u union select w.grp from waiting w
    union select d.grp from deferred d union select t.grp from starts t
  )
  select pg_catalog.split_part(g.grp, '|', 1), g.grp, l.concurrency,
         coalesce(u.running, 0), coalesce(w.waiting, 0) + coalesce(h.n, 0), l.rate_n, l.rate_per_s,
         (select pg_catalog.count(*)::integer from pg_catalog.unnest(t.starts) s(at)
           where s.at > jobs.now() - pg_catalog.make_interval(secs => coalesce(l.rate_per_s, 0))),
         coalesce(d.deferred, 0)
    from groups g
    left join jobs.limit l on l.name = pg_catalog.split_part(g.grp, '|', 1)
    left join used u on u.grp = g.grp
    left join waiting w on w.grp = g.grp
    left join starts t on t.grp = g.grp
    left join deferred d on d.grp = g.grp
    left join held h on h.grp = g.grp
   order by g.grp
$function$;

-- new: jobs.limits()
CREATE OR REPLACE FUNCTION jobs.limits()
 RETURNS TABLE(name text, scope text, target text, key_path text[], concurrency integer, rate_n integer, rate_per_s double precision, when_busy text, origin text, updated_at timestamp with time zone)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select l.name, l.scope, l.target, l.key_path, l.concurrency, l.rate_n, l.rate_per_s,
         l.when_busy, l.origin, l.updated_at
    from jobs.limit l
   where l.scope <> 'throttle'
   order by l.name
$function$;

-- new: jobs.list_jobs(jsonb,bigint,integer)
CREATE OR REPLACE FUNCTION jobs.list_jobs(p_filter jsonb DEFAULT '{}'::jsonb, p_after_id bigint DEFAULT NULL::bigint, p_limit integer DEFAULT 50)
 RETURNS SETOF jobs.job_view
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_states jobs.job_state[];
  v_times  timestamptz[];
  v_field  text;
begin
  if p_filter is null or pg_catalog.jsonb_typeof(p_filter) <> 'object' then
    perform jobs.raise_error('invalid_argument', 'filter must be a JSON object');
  end if;
  select k into v_field from pg_catalog.jsonb_object_keys(p_filter) k
   where k not in ('state', 'queue', 'name', 'tenant', 'key', 'created_after', 'created_before',
                   'finished_after', 'finished_before')
   limit 1;
  if v_field is not null then
    perform jobs.raise_error('invalid_argument', pg_catalog.format(
      'unknown filter field %L (fields: state, queue, name, tenant, key, created_after, '
      'created_before, finished_after, finished_before)', v_field));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  begin
    v_states := jobs.filter_values(p_filter, 'state')::jobs.job_state[];
  exception when invalid_text_representation then
    perform jobs.raise_error('invalid_argument', 'filter.state names an unknown state',
      null, 'states: ready, running, parked, succeeded, failed, dead, cancelled, interrupted');
  end;
  begin
    v_times := array[(p_filter->>'created_after')::timestamptz,
                     (p_filter->>'created_before')::timestamptz,
                     (p_filter->>'finished_after')::timestamptz,
                     (p_filter->>'finished_before')::timestamptz];
  exception when invalid_datetime_format or datetime_field_overflow then
    perform jobs.raise_error('invalid_argument', 'filter times must be ISO 8601 timestamps');
  end;
  return query
    select v.id, v.name, v.queue, v.tenant, v.key, v.state, v.priority, v.run_at, v.attempt,
           v.max_attempts, v.retry_base_s, v.retry_cap_s, v.retry_jitter, v.dead_letter,
           v.timeout_s, v.claim, v.lease_expires_at, v.worker, v.progress, v.last_error,
           v.result, v.traceparent, v.created_at, v.started_at, v.finished_at, v.payload,
           v.parent_id, v.parent_step
      from jobs.job_view v
     where (p_after_id is null or v.id < p_after_id)
       and (v_states is null or v.state = any (v_states))
       and (p_filter->'queue' is null or v.queue = any (jobs.filter_values(p_filter, 'queue')))
       and (p_filter->'name' is null or v.name = any (jobs.filter_values(p_filter, 'name')))
       and (p_filter->'tenant' is null or v.tenant = any (jobs.filter_values(p_filter, 'tenant')))
       and (p_filter->'key' is null or v.key = any (jobs.filter_values(p_filter, 'key')))
       and (v_times[1] is null or v.created_at >= v_times[1])
       and (v_times[2] is null or v.created_at < v_times[2])
       and (v_times[3] is null or v.finished_at >= v_times[3])
       and (v_times[4] is null or v.finished_at < v_times[4])
     order by v.id desc
     limit p_limit;
end
$function$;

-- new: jobs.personal_data()
CREATE OR REPLACE FUNCTION jobs.personal_data()
 RETURNS TABLE(name text, personal_paths text[], jobs bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select t.name, t.personal_paths,
         (select pg_catalog.count(*) from jobs.job j where j.name = t.name)
    from jobs.job_type t
   where pg_catalog.cardinality(t.personal_paths) > 0
   order by t.name
$function$;

-- new: jobs.purge(integer,boolean,jsonb)
CREATE OR REPLACE FUNCTION jobs.purge(p_max integer DEFAULT 1000, p_dry_run boolean DEFAULT false, p_policy jsonb DEFAULT NULL::jsonb)
 RETURNS TABLE(what text, deleted bigint, remaining bigint)
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_now      timestamptz := jobs.now();
  v_left     integer;
  v_state    jobs.job_state;
  v_queues   text[];        -- the queues with their own ages ('*' excluded)
  v_cuts     timestamptz[]; -- per queue: the cutoff of v_state
  v_awaits   timestamptz[]; -- per queue: the awaited cutoff
  v_dcut     timestamptz;   -- every other queue: the cutoff of v_state
  v_dawait   timestamptz;
  v_maxcut   timestamptz;   -- the latest cutoff of v_state over all queues (index bound)
  v_ecut     timestamptz;   -- events: created before this
  v_jobs     bigint := 0;
  v_outbox   bigint := 0;
  v_events   bigint := 0;
  v_jrest    bigint := 0;
  v_erest    bigint := 0;
  v_n        bigint;
  v_o        bigint;
  v_bound    bigint;
  v_cap      bigint;        -- a counted remainder stops here (dry runs count it all)
begin
  -- GUARD
  if p_max is null or p_max not between 1 and 100000 then
    perform jobs.raise_error('invalid_retention',
      pg_catalog.format('max must be between 1 and 100000, not %s', coalesce(p_max::text, 'null')));
  end if;
  if p_dry_run is null then
    perform jobs.raise_error('invalid_retention', 'dry_run must be true or false');
  end if;
  v_left := p_max;
  v_cap := p_max;

  -- JOBS, one final state at a time (the policy is resolved once per state).
  foreach v_state in array array['succeeded', 'cancelled', 'failed', 'dead']::jobs.job_state[] loop
    select pg_catalog.array_agg(p.queue order by p.queue) filter (where p.queue <> '*'),
           pg_catalog.array_agg(jobs.purge_cutoff(v_now, a.age) order by p.queue)
             filter (where p.queue <> '*'),
           pg_catalog.array_agg(jobs.purge_cutoff(v_now, p.awaited_s) order by p.queue)
             filter (where p.queue <> '*'),
           pg_catalog.max(jobs.purge_cutoff(v_now, a.age)) filter (where p.queue = '*'),
           pg_catalog.max(jobs.purge_cutoff(v_now, p.awaited_s)) filter (where p.queue = '*'),
           pg_catalog.max(jobs.purge_cutoff(v_now, a.age)),
           pg_catalog.max(jobs.purge_cutoff(v_now, p.events_s))
      into v_queues, v_cuts, v_awaits, v_dcut, v_dawait, v_maxcut, v_ecut
      from jobs.retention_policy(p_policy) p
     cross join lateral (select case v_state when 'succeeded' then p.succeeded_s
                                             when 'failed' then p.failed_s
                                             when 'dead' then p.dead_s
                                             else p.cancelled_s end as age) a;
    continue when v_maxcut = '-infinity';
    v_queues := coalesce(v_queues, '{}');

    if not p_dry_run and v_left > 0 then
      -- DELETE at most v_left of them, oldest first; rows others hold are skipped.
      with victims as (
        select j.id from jobs.job j
         where j.state = v_state and j.finished_at is not null and j.finished_at < v_maxcut
           and j.finished_at < coalesce(v_cuts[pg_catalog.array_position(v_queues, j.queue)], v_dcut)
           and (not j.settle_watched
                or j.finished_at < coalesce(v_awaits[pg_catalog.array_position(v_queues, j.queue)],
                                            v_dawait))
           and jobs.purge_unreferenced(j.id, j.parent_id)
         order by j.state, j.finished_at  -- job_retention_idx's order: read, not sorted
         limit v_left
           for update of j skip locked
      ), gone as (
        delete from jobs.job j using victims v
         where j.id = v.id and j.state = v_state
        returning j.id
      ), staged as (
        -- the outbox row that created the job carries its id
        delete from jobs.outbox o using gone g
         where o.id = g.id and o.published_at is not null
        returning o.id
      )
      select (select pg_catalog.count(*) from gone), (select pg_catalog.count(*) from staged)
        into v_n, v_o;
      v_jobs := v_jobs + v_n;
      v_outbox := v_outbox + v_o;
      v_left := v_left - v_n::integer;
    end if;
    -- COUNT what is (still) eligible, by the same rules: all of it in a dry run, else
    -- up to v_cap (a call stays bounded however large the backlog; rows others held
    -- stay eligible)
    select pg_catalog.count(*) into v_n from (
      select 1 from jobs.job j
       where j.state = v_state and j.finished_at is not null and j.finished_at < v_maxcut
         and j.finished_at < coalesce(v_cuts[pg_catalog.array_position(v_queues, j.queue)], v_dcut)
         and (not j.settle_watched
              or j.finished_at < coalesce(v_awaits[pg_catalog.array_position(v_queues, j.queue)],
                                          v_dawait))
         and jobs.purge_unreferenced(j.id, j.parent_id)
       limit case when p_dry_run then null else v_cap end) e;
    v_jrest := v_jrest + v_n;
  end loop;

  -- EVENTS: by age, never one a waiting job may still look back to.
  if v_ecut is null then
    select jobs.purge_cutoff(v_now, p.events_s) into v_ecut
      from jobs.retention_policy(p_policy) p where p.queue = '*';
  end if;
  v_ecut := least(v_ecut, (select pg_catalog.min(coalesce(j.first_started_at, j.created_at))
                             from jobs.event_wait w join jobs.job j on j.id = w.job_id
                            where j.state in ('ready', 'running', 'parked', 'interrupted')));
  if v_ecut > '-infinity' then
    -- Events are deleted oldest first, so the first event (by id) not old enough bounds
    -- the old ones: every smaller id is older (ids are taken in time order; an event
    -- written late by a long transaction only waits longer).
    select pg_catalog.min(e.id) into v_bound from jobs.event e where e.created_at >= v_ecut;
    select pg_catalog.count(*) into v_erest
      from (select 1 from jobs.event e where v_bound is null or e.id < v_bound
             limit case when p_dry_run then null else v_cap end) x;
    if not p_dry_run and v_left > 0 and v_erest > 0 then
      with victims as (
        select e.id from jobs.event e
         where (v_bound is null or e.id < v_bound) and e.created_at < v_ecut
         order by e.id
         limit v_left
           for update skip locked
      ), gone as (
        delete from jobs.event e using victims v where e.id = v.id returning e.id
      )
      select pg_catalog.count(*) into v_n from gone;
      v_events := v_n;
      v_erest := v_erest - v_n;  -- at the cap: still at least this many
    end if;
  end if;

  return query values ('job'::text, v_jobs, v_jrest),
                      ('outbox'::text, v_outbox, null::bigint),
                      ('event'::text, v_events, v_erest);
end
$function$;

-- new: jobs.purge_cutoff(timestamp with time zone,double precision)
CREATE OR REPLACE FUNCTION jobs.purge_cutoff(p_now timestamp with time zone, p_age_s double precision)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO ''
AS $function$
  select case when p_age_s >= 'Infinity'::double precision then '-infinity'::timestamptz
              else p_now - pg_catalog.make_interval(secs => p_age_s) end
$function$;

-- new: jobs.purge_unreferenced(bigint,bigint)
CREATE OR REPLACE FUNCTION jobs.purge_unreferenced(p_id bigint, p_parent_id bigint)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select not exists (select 1 from jobs.job c
                      where c.parent_id = p_id
                        and c.state in ('ready', 'running', 'parked', 'interrupted'))
     and (p_parent_id is null
          or not exists (select 1 from jobs.job p
                          where p.id = p_parent_id
                            and p.state in ('ready', 'running', 'parked', 'interrupted')))
$function$;

-- new: jobs.queue_gauges()
CREATE OR REPLACE FUNCTION jobs.queue_gauges()
 RETURNS TABLE(queue text, paused boolean, ready bigint, scheduled bigint, running bigint, parked bigint, dead bigint, blocked bigint, oldest_ready_s double precision, demand bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  with clock as materialized (  -- jobs.now() once, not once per row
    select jobs.now() as at
  ),
  waiting as (
    select w.queue,
           pg_catalog.count(*) filter (where w.run_at <= k.at) as ready,
           pg_catalog.count(*) filter (where w.run_at > k.at) as scheduled,
           pg_catalog.count(*) filter (where w.run_at <= k.at
                                         and w.blocked_on is not null) as blocked,
           pg_catalog.min(w.run_at) filter (where w.run_at <= k.at
                                              and w.blocked_on is null) as oldest_at
      from (select c.queue, c.run_at, c.blocked_on from jobs.job c
             where c.state in ('ready', 'interrupted') and c.blocked_on is null
            union all
            select b.queue, b.run_at, b.blocked_on from jobs.job b
             where b.blocked_on is not null and b.state in ('ready', 'interrupted')) w
     cross join clock k
     group by w.queue
  ),
  running as (
    select r.queue, pg_catalog.count(*) as n from jobs.job r
     where r.state = 'running' group by r.queue
  ),
  parked as (
    select p.queue, pg_catalog.count(*) as n from jobs.job p
     where p.state = 'parked' group by p.queue
  ),
  dead as (
    select d.queue, pg_catalog.count(*) as n from jobs.job d
     where d.state = 'dead' group by d.queue
  ),
  names as (
    select w.queue from waiting w union select r.queue from running r
    union select p.queue from parked p union select d.queue from dead d
    union select q.name from jobs.queue q
  )
  select n.queue, coalesce(q.paused, false),
         coalesce(w.ready, 0), coalesce(w.scheduled, 0), coalesce(r.n, 0), coalesce(p.n, 0),
         coalesce(d.n, 0), coalesce(w.blocked, 0),
         coalesce(extract(epoch from k.at - w.oldest_at)::double precision, 0),
         coalesce(r.n, 0) + case when coalesce(q.paused, false) then 0
                                 else coalesce(w.ready, 0) - coalesce(w.blocked, 0) end
    from names n
    cross join clock k
    left join waiting w on w.queue = n.queue
    left join running r on r.queue = n.queue
    left join parked p on p.queue = n.queue
    left join dead d on d.queue = n.queue
    left join jobs.queue q on q.name = n.queue
   order by n.queue
$function$;

-- new: jobs.redact(text,jsonb)
CREATE OR REPLACE FUNCTION jobs.redact(p_name text, p_payload jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return jobs.redact_payload(p_payload,
                             (select t.sensitive_paths from jobs.job_type t where t.name = p_name));
end
$function$;

-- new: jobs.redact_at(jsonb,text[])
CREATE OR REPLACE FUNCTION jobs.redact_at(p_value jsonb, p_steps text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_head text := p_steps[1];
  v_rest text[] := p_steps[2:];
  v_type text := pg_catalog.jsonb_typeof(p_value);
begin
  if p_value is null or v_type = 'null' then
    return p_value;
  end if;
  if v_head is null then
    return '"[redacted]"'::jsonb;
  end if;
  if v_head = '[]' then
    if v_type <> 'array' then
      return p_value;
    end if;
    return coalesce((select pg_catalog.jsonb_agg(jobs.redact_at(e.value, v_rest) order by e.n)
                       from pg_catalog.jsonb_array_elements(p_value) with ordinality e(value, n)),
                    '[]'::jsonb);
  end if;
  if v_type <> 'object' then
    return p_value;
  end if;
  if v_head = '*' then
    return coalesce((select pg_catalog.jsonb_object_agg(e.key, jobs.redact_at(e.value, v_rest))
                       from pg_catalog.jsonb_each(p_value) e),
                    '{}'::jsonb);
  end if;
  if not p_value ? v_head then
    return p_value;
  end if;
  return pg_catalog.jsonb_set(p_value, array[v_head], jobs.redact_at(p_value->v_head, v_rest));
end
$function$;

-- new: jobs.redact_job_output(jsonb,jsonb,text[])
CREATE OR REPLACE FUNCTION jobs.redact_job_output(p_value jsonb, p_payload jsonb, p_paths text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  if p_value is null or p_paths is null or pg_catalog.cardinality(p_paths) = 0 then
    return p_value;
  end if;
  return jobs.redact_strings(p_value, jobs.redaction_secrets(p_payload, p_paths));
end
$function$;

-- new: jobs.redact_output(text,jsonb,jsonb)
CREATE OR REPLACE FUNCTION jobs.redact_output(p_name text, p_payload jsonb, p_value jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return jobs.redact_strings(p_value, jobs.redaction_secrets(p_payload,
           (select t.sensitive_paths from jobs.job_type t where t.name = p_name)));
end
$function$;

-- new: jobs.redact_payload(jsonb,text[])
CREATE OR REPLACE FUNCTION jobs.redact_payload(p_payload jsonb, p_paths text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_path  text;
  v_value jsonb := p_payload;
begin
  if p_paths is null then
    return case when p_payload is null or p_payload = '{}'::jsonb then p_payload
                else '"[redacted]"'::jsonb end;
  end if;
  foreach v_path in array p_paths loop
    v_value := jobs.redact_at(v_value, jobs.redaction_path_steps(v_path));
  end loop;
  return v_value;
end
$function$;

-- new: jobs.redact_strings(jsonb,text[])
CREATE OR REPLACE FUNCTION jobs.redact_strings(p_value jsonb, p_secrets text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  if p_value is null or p_secrets is null or pg_catalog.cardinality(p_secrets) = 0 then
    return p_value;
  end if;
  case pg_catalog.jsonb_typeof(p_value)
    when 'string' then
      return pg_catalog.to_jsonb(jobs.redact_text(p_value #>> '{}', p_secrets));
    when 'number' then
      return case when (p_value #>> '{}') = any (p_secrets) then '"[redacted]"'::jsonb
                  else p_value end;
    when 'object' then
      return coalesce((select pg_catalog.jsonb_object_agg(jobs.redact_text(e.key, p_secrets),
                                                          jobs.redact_strings(e.value, p_secrets))
                         from pg_catalog.jsonb_each(p_value) e), '{}'::jsonb);
    when 'array' then
      return coalesce((select pg_catalog.jsonb_agg(jobs.redact_strings(e.value, p_secrets) order by e.n)
                         from pg_catalog.jsonb_array_elements(p_value) with ordinality e(value, n)),
                      '[]'::jsonb);
    else
      return p_value;
  end case;
end
$function$;

-- new: jobs.redact_text(text,text[])
CREATE OR REPLACE FUNCTION jobs.redact_text(p_text text, p_secrets text[])
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_secret text;
  v_text   text := p_text;
begin
  if p_text is null or p_secrets is null then
    return p_text;
  end if;
  foreach v_secret in array p_secrets loop
    v_text := pg_catalog.replace(v_text, v_secret, '[redacted]');
  end loop;
  return v_text;
end
$function$;

-- new: jobs.redaction_jsonpath(text)
CREATE OR REPLACE FUNCTION jobs.redaction_jsonpath(p_path text)
 RETURNS jsonpath
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_step text;
  v_path text := 'strict $';
begin
  foreach v_step in array jobs.redaction_path_steps(p_path) loop
    v_path := v_path || case v_step
      when '[]' then '[*]'
      when '*' then '.*'
      else '."' || pg_catalog.replace(pg_catalog.replace(v_step, '\', '\\'), '"', '\"') || '"'
    end;
  end loop;
  return (v_path || '.**')::jsonpath;
end
$function$;

-- new: jobs.redaction_path_problem(text)
CREATE OR REPLACE FUNCTION jobs.redaction_path_problem(p_path text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_segment text;
begin
  if p_path is null or p_path = '' then
    return 'a path is a non-empty string';
  end if;
  foreach v_segment in array pg_catalog.string_to_array(p_path, '.') loop
    if v_segment !~ '^(\*|[^.\[\]*]+)(\[\])*$' then
      return pg_catalog.format(
        'path %L: segment %L is not a key, ''*'', or a key followed by []', p_path, v_segment);
    end if;
  end loop;
  return null;
end
$function$;

-- new: jobs.redaction_path_steps(text)
CREATE OR REPLACE FUNCTION jobs.redaction_path_steps(p_path text)
 RETURNS text[]
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
declare
  v_segment text;
  v_base    text;
  v_steps   text[] := '{}';
begin
  foreach v_segment in array pg_catalog.string_to_array(p_path, '.') loop
    v_base := pg_catalog.replace(v_segment, '[]', '');
    if v_base <> '' then
      v_steps := v_steps || v_base;
    end if;
    for i in 1 .. (pg_catalog.length(v_segment) - pg_catalog.length(v_base)) / 2 loop
      v_steps := v_steps || '[]'::text;
    end loop;
  end loop;
  return v_steps;
end
$function$;

-- new: jobs.redaction_secrets(jsonb,text[])
CREATE OR REPLACE FUNCTION jobs.redaction_secrets(p_payload jsonb, p_paths text[])
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO ''
AS $function$
  select coalesce(pg_catalog.array_agg(s.v order by pg_catalog.length(s.v) desc, s.v), '{}')
    from (select distinct l.value #>> '{}' as v
            from pg_catalog.unnest(coalesce(p_paths, '{}')) p(path),
                 pg_catalog.jsonb_path_query(p_payload, jobs.redaction_jsonpath(p.path),
                                             '{}', true) l(value)
           where pg_catalog.jsonb_typeof(l.value) in ('string', 'number', 'boolean')
             and pg_catalog.length(l.value #>> '{}') >= 3) s
$function$;

-- new: jobs.retention_age(jsonb,text)
CREATE OR REPLACE FUNCTION jobs.retention_age(p_value jsonb, p_what text)
 RETURNS double precision
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  if p_value is null or pg_catalog.jsonb_typeof(p_value) = 'null' then
    return null;
  elsif p_value = '"forever"'::jsonb then
    return 'Infinity'::double precision;
  elsif pg_catalog.jsonb_typeof(p_value) = 'number' and (p_value #>> '{}')::numeric >= 0 then
    return (p_value #>> '{}')::double precision;
  end if;
  perform jobs.raise_error('invalid_retention',
    pg_catalog.format('%s must be a number of seconds >= 0, "forever" or null, not %s',
                      p_what, p_value::text));
  return null;
end
$function$;

-- new: jobs.retention_check(jsonb,boolean)
CREATE OR REPLACE FUNCTION jobs.retention_check(p_policy jsonb, p_queues_allowed boolean)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_key  text;
  v_q    text;
begin
  if p_policy is null or pg_catalog.jsonb_typeof(p_policy) <> 'object' then
    perform jobs.raise_error('invalid_retention', 'a retention policy must be a JSON object');
  end if;
  for v_key in select k from pg_catalog.jsonb_object_keys(p_policy) k order by 1 loop
    if v_key = 'queues' and p_queues_allowed then
      if pg_catalog.jsonb_typeof(p_policy->'queues') <> 'object' then
        perform jobs.raise_error('invalid_retention', 'queues must be an object {queue: policy}');
      end if;
      for v_q in select k from pg_catalog.jsonb_object_keys(p_policy->'queues') k order by 1 loop
        if v_q = '' or v_q = '*' then
          perform jobs.raise_error('invalid_retention',
            'a queue override needs a queue name (the top level is every queue''s)');
        end if;
        perform jobs.retention_check(p_policy->'queues'->v_q, false);
        if p_policy->'queues'->v_q ? 'events' then
          perform jobs.raise_error('invalid_retention',
            'events have no queue: give their age at the top level');
        end if;
      end loop;
    elsif v_key in ('succeeded', 'failed', 'dead', 'cancelled', 'awaited', 'events') then
      perform jobs.retention_age(p_policy->v_key, v_key);
    else
      perform jobs.raise_error('unknown_retention_key',
        pg_catalog.format('%L is not a retention key', v_key), null,
        'keys: succeeded, failed, dead, cancelled, awaited, events'
        || case when p_queues_allowed then ', queues' else '' end);
    end if;
  end loop;
end
$function$;

-- new: jobs.retention_defaults()
CREATE OR REPLACE FUNCTION jobs.retention_defaults()
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO ''
AS $function$
  select '{"succeeded": 86400, "failed": 2592000, "dead": 2592000, "cancelled": 604800,
           "awaited": 3600, "events": 604800}'::jsonb
$function$;

-- new: jobs.retention_policy(jsonb)
CREATE OR REPLACE FUNCTION jobs.retention_policy(p_policy jsonb DEFAULT NULL::jsonb)
 RETURNS TABLE(queue text, succeeded_s double precision, failed_s double precision, dead_s double precision, cancelled_s double precision, awaited_s double precision, events_s double precision)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_p jsonb := coalesce(p_policy, '{}');
begin
  perform jobs.retention_check(v_p, true);
  return query
    with qs as (
      select '*'::text as queue
      union select r.queue from jobs.retention r
      union select k from pg_catalog.jsonb_object_keys(coalesce(v_p->'queues', '{}')) k
    )
    select qs.queue,
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'succeeded', 'succeeded'), q.succeeded_s,
                    jobs.retention_age(v_p->'succeeded', 'succeeded'), d.succeeded_s,
                    (b->>'succeeded')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'failed', 'failed'), q.failed_s,
                    jobs.retention_age(v_p->'failed', 'failed'), d.failed_s,
                    (b->>'failed')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'dead', 'dead'), q.dead_s,
                    jobs.retention_age(v_p->'dead', 'dead'), d.dead_s,
                    (b->>'dead')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'cancelled', 'cancelled'), q.cancelled_s,
                    jobs.retention_age(v_p->'cancelled', 'cancelled'), d.cancelled_s,
                    (b->>'cancelled')::double precision),
           coalesce(jobs.retention_age(v_p->'queues'->qs.queue->'awaited', 'awaited'), q.awaited_s,
                    jobs.retention_age(v_p->'awaited', 'awaited'), d.awaited_s,
                    (b->>'awaited')::double precision),
           -- events have no queue: the '*' row's age for every row
           coalesce(jobs.retention_age(v_p->'events', 'events'),
                    d.events_s, (b->>'events')::double precision)
      from qs
      cross join jobs.retention_defaults() b
      left join jobs.retention q on q.queue = qs.queue and qs.queue <> '*'
      left join jobs.retention d on d.queue = '*'
     order by qs.queue <> '*', qs.queue;
end
$function$;

-- new: jobs.retention_put(text,jsonb)
CREATE OR REPLACE FUNCTION jobs.retention_put(p_queue text, p_policy jsonb)
 RETURNS TABLE(queue text, succeeded_s double precision, failed_s double precision, dead_s double precision, cancelled_s double precision, awaited_s double precision, events_s double precision)
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_queue text := coalesce(nullif(p_queue, ''), '*');
begin
  -- GUARD
  perform jobs.retention_check(p_policy, false);
  if v_queue <> '*' and p_policy ? 'events' then
    perform jobs.raise_error('invalid_retention',
      'events have no queue: set their age on the default (queue ''*'')');
  end if;
  -- WRITE (upsert; a key not given keeps its stored value)
  insert into jobs.retention as r (queue, succeeded_s, failed_s, dead_s, cancelled_s,
                                   awaited_s, events_s, updated_at)
  values (v_queue,
          jobs.retention_age(p_policy->'succeeded', 'succeeded'),
          jobs.retention_age(p_policy->'failed', 'failed'),
          jobs.retention_age(p_policy->'dead', 'dead'),
          jobs.retention_age(p_policy->'cancelled', 'cancelled'),
          jobs.retention_age(p_policy->'awaited', 'awaited'),
          jobs.retention_age(p_policy->'events', 'events'),
          jobs.now())
  on conflict on constraint retention_pkey do update
     set succeeded_s = case when p_policy ? 'succeeded' then excluded.succeeded_s else r.succeeded_s end,
         failed_s    = case when p_policy ? 'failed' then excluded.failed_s else r.failed_s end,
         dead_s      = case when p_policy ? 'dead' then excluded.dead_s else r.dead_s end,
         cancelled_s = case when p_policy ? 'cancelled' then excluded.cancelled_s else r.cancelled_s end,
         awaited_s   = case when p_policy ? 'awaited' then excluded.awaited_s else r.awaited_s end,
         events_s    = case when p_policy ? 'events' then excluded.events_s else r.events_s end,
         updated_at  = excluded.updated_at;
  return query
    select r.queue, r.succeeded_s, r.failed_s, r.dead_s, r.cancelled_s, r.awaited_s, r.events_s
      from jobs.retention r where r.queue = v_queue;
end
$function$;

-- new: jobs.retention_remove(text)
CREATE OR REPLACE FUNCTION jobs.retention_remove(p_queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  delete from jobs.retention r where r.queue = coalesce(nullif(p_queue, ''), '*');
  return found;
end
$function$;

-- new: jobs.slots_freed()
CREATE OR REPLACE FUNCTION jobs.slots_freed()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO ''
 SET enable_bitmapscan TO 'off'
AS $function$
declare
  v_groups text[];
  v_queues text[];
begin
  if not exists (select from old_jobs o where o.slots is not null and o.state = 'running') then
    return null;
  end if;
  with freed as (
    delete from jobs.slot s
     using (select g, o.id, o.queue
              from old_jobs o
              join new_jobs n on n.id = o.id
             cross join lateral pg_catalog.unnest(o.slots) as g
             where o.state = 'running' and n.state <> 'running' and o.slots is not null) f
     where s.grp = f.g and s.job_id = f.id
    returning s.grp, f.queue
  )
  select pg_catalog.array_agg(distinct freed.grp), pg_catalog.array_agg(distinct freed.queue)
    into v_groups, v_queues
    from freed;
  if v_groups is null then
    return null;
  end if;
  if exists (select from jobs.job b
              where b.blocked_on = any (v_groups) and b.state in ('ready', 'interrupted')) then
    perform jobs.unblock(array(
      select (select b.id from jobs.job b
               where b.blocked_on = g and b.state in ('ready', 'interrupted')
               order by b.priority, b.run_at, b.id
               limit 1
                 for update skip locked)
        from pg_catalog.unnest(v_groups) as g));
  end if;
  -- Jobs held back by a full global or queue limit stay claimable (no waiter is
  -- recorded), and the claims skip picking while it is full: when these slots were
  -- the group's last (the group was full as this transaction sees it), wake the
  -- claimers of the jobs' queues. (Those of other queues under the same global limit
  -- take a free slot at their next poll.) A group with room wakes no one: its
  -- claimers are not waiting for it.
  if exists (select from jobs.limit l
              where l.scope in ('global', 'queue') and l.concurrency is not null
                and l.name || '|' = any (v_groups)
                and l.concurrency <= (select pg_catalog.count(*) from jobs.slot s
                                       where s.grp = l.name || '|')
                                     + (select pg_catalog.count(*) from old_jobs o
                                         where l.name || '|' = any (o.slots))) then
    perform jobs.wake(v_queues);
  end if;
  return null;
end
$function$;

-- new: jobs.stats(double precision)
CREATE OR REPLACE FUNCTION jobs.stats(p_window_s double precision DEFAULT 300)
 RETURNS TABLE(queue text, succeeded bigint, failed bigint, dead bigint, cancelled bigint, per_s double precision, wait_p50_s double precision, wait_p95_s double precision, run_p50_s double precision, run_p95_s double precision)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_now timestamptz := jobs.now();
begin
  -- (PostgreSQL orders NaN above infinity, so this refuses it too)
  if not coalesce(p_window_s > 0 and p_window_s < 'infinity'::double precision, false) then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('the stats window must be a positive number of seconds, not %s',
                        coalesce(p_window_s::text, 'null')));
  end if;
  return query
  with recent as (
    select f.queue, f.state,
           extract(epoch from f.first_started_at - f.created_at)::double precision as wait_s,
           case when f.state in ('succeeded', 'failed', 'dead')
                then extract(epoch from f.finished_at - f.started_at)::double precision
           end as run_s
      from jobs.job f
     where f.finished_at is not null
       and f.finished_at > v_now - pg_catalog.make_interval(secs => p_window_s)
       and f.finished_at <= v_now
  )
  select r.queue,
         pg_catalog.count(*) filter (where r.state = 'succeeded'),
         pg_catalog.count(*) filter (where r.state = 'failed'),
         pg_catalog.count(*) filter (where r.state = 'dead'),
         pg_catalog.count(*) filter (where r.state = 'cancelled'),
         pg_catalog.count(*) / p_window_s,
         pg_catalog.percentile_cont(0.5) within group (order by r.wait_s),
         pg_catalog.percentile_cont(0.95) within group (order by r.wait_s),
         pg_catalog.percentile_cont(0.5) within group (order by r.run_s),
         pg_catalog.percentile_cont(0.95) within group (order by r.run_s)
    from recent r
   group by r.queue
   order by r.queue;
end
$function$;

-- new: jobs.unblock(bigint[])
CREATE OR REPLACE FUNCTION jobs.unblock(p_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_queues text[];
begin
  if p_ids is null or pg_catalog.cardinality(p_ids) = 0 then
    return;
  end if;
  with moved as (
    update jobs.job as j set blocked_on = null
     where j.id = any (p_ids) and j.blocked_on is not null
    returning j.queue
  )
  select pg_catalog.array_agg(distinct m.queue) into v_queues from moved m;
  perform jobs.wake(v_queues);
end
$function$;

-- new: jobs.unblock_free(integer)
CREATE OR REPLACE FUNCTION jobs.unblock_free(p_max integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO ''
 SET enable_bitmapscan TO 'off'
AS $function$
declare
  v_ids bigint[];
begin
  v_ids := array(
    select w.id
      from (select b.blocked_on as grp, pg_catalog.count(*) as n
              from jobs.job b
             where b.blocked_on is not null and b.state in ('ready', 'interrupted')
             group by b.blocked_on) g
      left join jobs.limit l on l.name = pg_catalog.split_part(g.grp, '|', 1)
     cross join lateral (
       select b.id from jobs.job b
        where b.blocked_on = g.grp and b.state in ('ready', 'interrupted')
        order by b.priority, b.run_at, b.id
        limit greatest(0, case when l.concurrency is null then g.n
                               else l.concurrency - (select pg_catalog.count(*) from jobs.slot s
                                                      where s.grp = g.grp) end)
          for update skip locked) w
     limit p_max);
  perform jobs.unblock(v_ids);
  return pg_catalog.cardinality(v_ids);
end
$function$;

-- changed: jobs.ack_many(bigint[],bigint[],jsonb[])
CREATE OR REPLACE FUNCTION jobs.ack_many(p_ids bigint[], p_claims bigint[], p_results jsonb[] DEFAULT NULL::jsonb[])
 RETURNS TABLE(id bigint, ok boolean)
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_now     timestamptz := jobs.now();
  v_done    bigint[];
  v_watched bigint[];
begin
  perform jobs.check_batch(p_ids, p_claims, p_results);
  with input as (
    select u.id, u.claim, u.result
      from unnest(p_ids, p_claims,
                  coalesce(p_results, pg_catalog.array_fill(null::jsonb, array[pg_catalog.cardinality(p_ids)])))
           as u(id, claim, result)
  ),
  done as (
    update jobs.job as j
       set state = 'succeeded',
           result = i.result,
           finished_at = v_now,
           lease_expires_at = null,
           -- an earlier attempt's error stays for the record, marked as history
           last_error = case when j.last_error is not null
                             then j.last_error || '{"historical": true}' end
      from (select input.id, input.claim, input.result from input order by input.id) as i
     where j.id = i.id and j.claim = i.claim and j.state = 'running'
    returning j.id, j.settle_watched
  )
  select pg_catalog.array_agg(done.id),
         pg_catalog.array_agg(done.id) filter (where done.settle_watched)
    into v_done, v_watched
    from done;
  -- NOTIFY result waiters of watched jobs only (once per call).
  perform jobs.notify_settled(v_watched);
  return query
    select u.id, u.id = any (coalesce(v_done, '{}'))
      from unnest(p_ids) with ordinality as u(id, ord)
     order by u.ord;
end
$function$;

-- changed: jobs.apply_requeue(bigint[])
CREATE OR REPLACE FUNCTION jobs.apply_requeue(p_ids bigint[])
 RETURNS void
 LANGUAGE sql
 SET search_path TO ''
AS $function$
  with moved as (
    update jobs.job as j
       set state = 'ready', attempt = 0, run_at = jobs.now(), finished_at = null,
           lease_expires_at = null, result = null, blocked_on = null
     where j.id = any (p_ids) and j.state in ('failed', 'dead', 'cancelled')
    returning j.queue
  )
  select jobs.wake(array(select distinct moved.queue from moved))
$function$;

-- changed: jobs.claim(text[],text,integer,double precision,jsonb)
CREATE OR REPLACE FUNCTION jobs.claim(p_queues text[], p_worker text, p_limit integer DEFAULT 1, p_lease_s double precision DEFAULT 30, p_options jsonb DEFAULT '{}'::jsonb)
 RETURNS TABLE(id bigint, name text, queue text, tenant text, key text, payload jsonb, priority smallint, attempt integer, max_attempts integer, retry_base_s double precision, retry_cap_s double precision, retry_jitter text, claim bigint, lease_expires_at timestamp with time zone, timeout_s double precision, progress jsonb, traceparent text, created_at timestamp with time zone, started_at timestamp with time zone, steps jsonb)
 LANGUAGE plpgsql
 SET search_path TO ''
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now    timestamptz := jobs.now();
  v_queues text[];
  v_names  text[];
  v_unwind_ids    bigint[];
  v_unwind_seqs   integer[];
  v_unwind_states jobs.job_state[];
  v_unwind_errors jsonb[];
  v_limited boolean;
  v_ids     bigint[];  -- limited: the candidates
begin
  -- GUARD
  if p_queues is null or pg_catalog.cardinality(p_queues) = 0 then
    perform jobs.raise_error('queues_required', 'claim needs at least one queue',
                             null, 'pass the queues this worker serves');
  end if;
  if p_worker is null or p_worker = '' then
    perform jobs.raise_error('invalid_argument', 'worker is required');
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('limit must be between 1 and 1000, got %s', p_limit));
  end if;
  if p_lease_s is null or p_lease_s <= 0 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('lease_s must be positive, got %s', p_lease_s));
  end if;
  if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object'
     or exists (select 1 from pg_catalog.jsonb_object_keys(p_options) k
                 where k not in ('names', 'recover')) then
    perform jobs.raise_error('invalid_argument',
      'options takes only {"names": [...], "recover": true|false}');
  end if;
  if p_options ? 'recover' and pg_catalog.jsonb_typeof(p_options->'recover') <> 'boolean' then
    perform jobs.raise_error('invalid_argument', 'options.recover must be true or false');
  end if;
  if p_options ? 'names' then
    if pg_catalog.jsonb_typeof(p_options->'names') <> 'array' then
      perform jobs.raise_error('invalid_argument', 'options.names must be an array of job names');
    end if;
    v_names := array(select pg_catalog.jsonb_array_elements_text(p_options->'names'));
  end if;

  -- RECOVER lapsed leases: bounded, by job_lease_idx. The attempt counts: where it leads
  -- is jobs.retry_state's answer, except that a job with compensable steps never is
  -- buried: on its final attempt it starts unwinding instead (back to ready,
  -- compensating, its final state recorded), and one already compensating goes back to
  -- ready to finish its unwind (sql/50_steps.sql).
  if coalesce((p_options->>'recover')::boolean, true) then
    with lapsed as (
      select l.id, jobs.retry_state(l.attempt, l.max_attempts, l.dead_letter) as next_state
        from jobs.job l
       where l.state = 'running' and l.lease_expires_at < v_now
         and l.queue = any (p_queues)
       order by l.lease_expires_at
       limit 100
         for update skip locked
    ), moved as (
      update jobs.job as j
         set state = case when j.compensable or j.compensating then 'ready'
                          else n.next_state end,
             -- run_at is left as it was: a recovered job keeps its place in line
             -- (priority, run_at, id), ahead of the backlog that queued behind it
             lease_expires_at = null,
             finished_at = case when n.next_state = 'ready' or j.compensable or j.compensating
                                then null else v_now end,
             compensating = j.compensating or (j.compensable and n.next_state <> 'ready'),
             step_seq = j.step_seq + case when j.compensable and not j.compensating
                                               and n.next_state <> 'ready' then 1 else 0 end,
             last_error = pg_catalog.jsonb_build_object(
               'kind', 'lease_expired',
               'message', pg_catalog.format('the lease of worker %s expired during attempt %s',
                                            j.worker, j.attempt),
               'attempt', j.attempt,
               'at', v_now)
        from lapsed n
       where j.id = n.id
      returning j.id, j.step_seq, n.next_state, j.last_error,
                j.compensable and n.next_state <> 'ready' as starts_unwind
    )
    select pg_catalog.array_agg(m.id), pg_catalog.array_agg(m.step_seq),
           pg_catalog.array_agg(m.next_state), pg_catalog.array_agg(m.last_error)
      into v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors
      from moved m
     where m.starts_unwind;
    if v_unwind_ids is not null then  -- (a SQL function: planned at every call)
      perform jobs.record_unwinds(v_unwind_ids, v_unwind_seqs, v_unwind_states, v_unwind_errors);
    end if;

    -- Free the slots a waiter did not hear of (sql/35_limits.sql).
    if exists (select from jobs.job b
                where b.blocked_on is not null and b.state in ('ready', 'interrupted')) then
      perform jobs.unblock_free(100);
    end if;

    -- Wake parked jobs whose time came (durable sleeps, wait timeouts).
    update jobs.job as j
       set state = 'ready'
      from (select p.id
              from jobs.job p
             where p.state = 'parked' and p.run_at <= v_now and p.queue = any (p_queues)
             order by p.run_at
             limit 100
               for update skip locked) as due
     where j.id = due.id;
  end if;

  -- PICK: paused queues are left out.
  v_queues := array(
    select q.name
      from pg_catalog.unnest(p_queues) as q(name)
     where not exists (select 1 from jobs.queue pq where pq.name = q.name and pq.paused));

  -- LIMITS (sql/35_limits.sql), only once any limit exists: pick more candidates
  -- than asked for, and claim those jobs.admit lets run (below).
  v_limited := exists (select from jobs.limit);
  if v_limited then
    -- A full global limit admits nothing, a full queue limit nothing of its queue: then
    -- there is nothing to pick (read without the limits' locks, this only saves work;
    -- jobs.admit decides under them).
    v_queues := array(
      select q.name from pg_catalog.unnest(v_queues) as q(name)
       where not exists (
         select from jobs.limit l
          where l.concurrency is not null
            and (l.scope = 'global' or (l.scope = 'queue' and l.target = q.name))
            and l.concurrency <= (select pg_catalog.count(*) from jobs.slot s
                                   where s.grp = l.name || '|')));
    v_ids := array(
      select c.id
        from pg_catalog.unnest(v_queues) as q(name)
        cross join lateral (
          select r.id, r.priority, r.run_at
            from jobs.job r
           where r.state in ('ready', 'interrupted') and r.blocked_on is null
             and r.queue = q.name
             and r.run_at <= v_now
             and (v_names is null or r.name = any (v_names))
           order by r.priority, r.run_at, r.id
           limit p_limit + 4
             for update skip locked) as c
       order by c.priority, c.run_at, c.id
       limit p_limit + 4);
  end if;

  -- CLAIM
  return query
    with picked as materialized (
      (select c.id, c.priority, c.run_at, null::text[] as slots, v_now as started_at
         from pg_catalog.unnest(v_queues) as q(name)
         cross join lateral (
           select r.id, r.priority, r.run_at
             from jobs.job r
            where r.state in ('ready', 'interrupted') and r.blocked_on is null
              and r.queue = q.name
              and r.run_at <= v_now
              and (v_names is null or r.name = any (v_names))
            order by r.priority, r.run_at, r.id
            limit p_limit
              for update skip locked) as c
        where not v_limited
        order by c.priority, c.run_at, c.id
        limit p_limit)
      union all
      -- limited: the candidates jobs.admit lets run, with the limit groups each takes
      -- and the admission's time as its start
      (select a.id, r.priority, r.run_at, a.slots, a.at
         from jobs.admit(v_ids, p_limit, v_now) a
         join jobs.job r on r.id = a.id and r.id = any (v_ids)  -- job_pkey, the candidates
        where v_limited)
    ),
    claimed as (
      update jobs.job as j
         set state = 'running',
             attempt = j.attempt + 1,
             claim = j.claim + 1,
             worker = p_worker,
             lease_expires_at = v_now + pg_catalog.make_interval(secs => p_lease_s),
             started_at = picked.started_at,
             first_started_at = coalesce(j.first_started_at, v_now),
             deferred_by = null,
             slots = picked.slots
        from picked
       where j.id = any (array(select p.id from picked p)) and j.id = picked.id
      returning j.id, j.name, j.queue, j.tenant, j.key, j.payload, j.priority, j.attempt,
                j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.claim,
                j.lease_expires_at, j.timeout_s, j.progress,
                j.traceparent, j.created_at, picked.run_at as picked_run_at, j.step_seq,
                j.started_at
    ),
    slotted as (  -- the limit groups the admitted jobs now hold (sql/35_limits.sql)
      insert into jobs.slot (grp, job_id)
      select g, p.id from picked p cross join lateral pg_catalog.unnest(p.slots) as g
      on conflict do nothing
    )
    select c.id, c.name, c.queue, c.tenant, c.key, c.payload, c.priority, c.attempt,
           c.max_attempts, c.retry_base_s, c.retry_cap_s, c.retry_jitter, c.claim,
           c.lease_expires_at, c.timeout_s, c.progress,
           c.traceparent, c.created_at, c.started_at,
           -- Stored steps (sql/50_steps.sql), read only for jobs that ever wrote one.
           case when c.step_seq > 0 then
             (select pg_catalog.jsonb_object_agg(s.name, s.value)
                from jobs.step s where s.job_id = c.id)
           end
      from claimed c
     order by c.priority, c.picked_run_at, c.id;
end
$function$;

-- changed: jobs.define_spec()
CREATE OR REPLACE FUNCTION jobs.define_spec()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_engine   text[] := array['id', 'state', 'attempt', 'claim', 'lease_expires_at', 'worker',
                             'progress', 'last_error', 'result', 'created_at', 'started_at',
                             'finished_at', 'first_started_at', 'step_seq', 'compensable',
                             'compensating', 'parent_id', 'parent_step', 'settle_watched',
                             'slots', 'blocked_on', 'deferred_by'];
  -- the fields that only steer an enqueue (not columns)
  v_steering jsonb := '{"delay_s": "double precision", "on_conflict": "text"}';
  v_fields   jsonb := '{}';
  v_defaults jsonb := '{}';
  v_columns  text[] := '{}';  -- spec columns the insert names (run_at is computed)
  v_order    text[];          -- the record's fields: steering ones, then columns in order
  v_checks   text := '';      -- one WHEN per field: a value not of its column's JSON type
  v_values   text;            -- the value rules
  v_given    text;            -- a spec without the fields it gives as JSON null
  v_base     text;            -- the spec's fields with their defaults, before it gives any
  v_known    text;            -- the fields' names
  v_col      record;
  v_default  jsonb;
  v_wrong    text;
  v_want     text;
begin
  -- FIELDS and DEFAULTS, from the columns of jobs.job
  v_order := array(select k from pg_catalog.jsonb_object_keys(v_steering) k order by k);
  for v_col in
    select a.attname::text as name, pg_catalog.format_type(a.atttypid, a.atttypmod) as type,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid) as default_expr
      from pg_catalog.pg_attribute a
      left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where a.attrelid = 'jobs.job'::pg_catalog.regclass and a.attnum > 0
       and not a.attisdropped and a.attname <> all (v_engine)
     order by a.attnum
  loop
    v_fields := v_fields || pg_catalog.jsonb_build_object(v_col.name, v_col.type);
    v_order := v_order || v_col.name;
    if v_col.default_expr is not null then
      -- a constant the catalog wrote itself (e.g. 'default'::text, 25, '{}'::jsonb)
      execute 'select pg_catalog.to_jsonb(' || v_col.default_expr || ')' into v_default;
      v_defaults := v_defaults || pg_catalog.jsonb_build_object(v_col.name, v_default);
    end if;
    if v_col.name <> 'run_at' then
      v_columns := v_columns || v_col.name;
    end if;
  end loop;
  v_fields := v_fields || v_steering;

  -- TYPES: what a JSON value of each column type must be (null always is: the field
  -- then takes its default). One WHEN per field, in jsonb key order, so the first
  -- wrong field named is the first in the spec as jsonb stores it.
  for v_col in
    select f.key as name, f.value #>> '{}' as type, pg_catalog.quote_literal(f.key) as lit
      from pg_catalog.jsonb_each(v_fields) f
     order by pg_catalog.octet_length(f.key), f.key
  loop
    v_wrong := case v_col.type
      when 'jsonb' then null
      when 'text' then 'when ''string'' then false'
      when 'boolean' then 'when ''boolean'' then false'
      when 'double precision' then 'when ''number'' then @ ({spec}->{field})::numeric > 1e308'
      when 'smallint' then 'when ''number'' then ({spec}->{field})::numeric % 1 <> 0 '
                           'or ({spec}->{field})::numeric not between -32768 and 32767'
      when 'integer' then 'when ''number'' then ({spec}->{field})::numeric % 1 <> 0 '
                          'or ({spec}->{field})::numeric not between -2147483648 and 2147483647'
      when 'timestamp with time zone' then 'when ''string'' then not jobs.is_time({spec}->>{field})'
    end;
    v_want := case v_col.type
      when 'text' then 'a string'
      when 'boolean' then 'true or false'
      when 'double precision' then 'a number'
      when 'smallint' then 'a whole number between -32768 and 32767'
      when 'integer' then 'a whole number between -2147483648 and 2147483647'
      when 'timestamp with time zone' then 'a time (ISO 8601, e.g. 2030-01-02T03:04:05Z)'
    end;
    if v_col.type <> 'jsonb' and v_wrong is null then
      raise exception 'jobs.define_spec: no JSON rule for column type % (field %)',
        v_col.type, v_col.name;
    end if;
    if v_wrong is not null then
      v_checks := v_checks || pg_catalog.format(
        E'\n        when case pg_catalog.jsonb_typeof({spec}->%1$s) when ''null'' then false %2$s'
        || E'\n                  else {spec} ? %1$s end then %3$L',
        v_col.lit, pg_catalog.replace(v_wrong, '{field}', v_col.lit),
        pg_catalog.format('%L must be %s', v_col.name, v_want));
    end if;
  end loop;

  -- jobs.job_spec: a spec's fields as one record (narrow, so reading a spec is cheap).
  -- Fields are added, never dropped or changed: a column of jobs.job is never either.
  -- A column added to jobs.job comes last, so does its field here: an upgraded type
  -- and a fresh one list the same fields in the same order.
  if pg_catalog.to_regtype('jobs.job_spec') is null then
    execute 'create type jobs.job_spec as (' ||
            (select pg_catalog.string_agg(pg_catalog.format('%I %s', f.name, v_fields->>f.name),
                                          ', ' order by f.ord)
               from pg_catalog.unnest(v_order) with ordinality as f(name, ord)) || ')';
  else
    for v_col in
      select f.name, v_fields->>f.name as type
        from pg_catalog.unnest(v_order) with ordinality as f(name, ord)
       where not exists (select from pg_catalog.pg_attribute a
                          where a.attrelid = 'jobs.job_spec'::pg_catalog.regclass
                            and a.attname = f.name and not a.attisdropped)
       order by f.ord
    loop
      execute pg_catalog.format('alter type jobs.job_spec add attribute %I %s',
                                v_col.name, v_col.type);
    end loop;
  end if;
  comment on type jobs.job_spec is
    'Private: the fields of a job spec (made by jobs.define_spec() from jobs.job).';

  execute pg_catalog.format($f$
    create or replace function jobs.spec_fields()
    returns jsonb language sql immutable set search_path = ''
    as $b$ select %L::jsonb $b$ $f$, v_fields);
  comment on function jobs.spec_fields() is
    'The job spec''s fields and their types (made by jobs.define_spec()).';
  execute pg_catalog.format($f$
    create or replace function jobs.spec_defaults()
    returns jsonb language sql immutable set search_path = ''
    as $b$ select %L::jsonb $b$ $f$, v_defaults);
  comment on function jobs.spec_defaults() is
    'The job spec''s defaults (made by jobs.define_spec() from the DEFAULTs of jobs.job).';

  -- The validation of one spec, written once here as two pieces of SQL over {spec} (the
  -- spec) and {r} (its fields with their defaults), then used by jobs.spec_problem_of
  -- (one spec: simple expressions, no query) and jobs.spec_problem (a batch: one query).
  v_values := $rules$case
        when {r}.name is null or {r}.name = '' then 'name is required'
        when {r}.key is null or {r}.key = '' then 'key is required (the idempotency key)'
        when {r}.queue = '' then 'queue must not be empty'
        when {r}.max_attempts < 1 then 'max_attempts must be at least 1'
        when {r}.retry_base_s <= 0 then 'retry_base_s must be positive'
        when {r}.retry_cap_s < {r}.retry_base_s then 'retry_cap_s must be at least retry_base_s'
        when {r}.retry_jitter not in ('none', 'full', 'equal')
          then 'retry_jitter must be none, full or equal'
        when {r}.timeout_s <= 0 then 'timeout_s must be positive'
        when {r}.delay_s < 0 then 'delay_s must not be negative'
        when {r}.delay_s is not null and {r}.run_at is not null
          then 'give run_at or delay_s, not both'
        when {r}.on_conflict not in ('return', 'error') then 'on_conflict must be return or error'
        when {r}.group_key = '' then 'group_key must not be empty'
        when {r}.debounce_s <= 0 then 'debounce_s must be positive'
        when {r}.debounce_s is not null and ({r}.run_at is not null or {r}.delay_s is not null)
          then 'give debounce_s, or run_at / delay_s, not both'
        when ({r}.throttle_n is null) <> ({r}.throttle_per_s is null)
          then 'give throttle_n and throttle_per_s together'
        when {r}.throttle_n < 1 then 'throttle_n must be at least 1'
        when {r}.throttle_per_s <= 0 then 'throttle_per_s must be positive'
      end$rules$;
  v_given := 'case when {spec} @? ''$.* ? (@ == null)'' then jobs.spec_given({spec}) else {spec} end';
  v_base := 'pg_catalog.jsonb_populate_record(null::jobs.job_spec, '
            || pg_catalog.quote_literal(v_defaults) || '::jsonb)';
  v_known := pg_catalog.quote_literal(array(select pg_catalog.jsonb_object_keys(v_fields)))
             || '::text[]';

  -- jobs.spec_problem_of(spec) -> what is wrong with one spec, or null. Reads no table.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
          pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.spec_problem_of(p_spec jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = ''
    as $b$
    declare
      v_problem text;
      v_r       jobs.job_spec;
    begin
      -- SHAPE: an object of known fields, each of its column's JSON type
      if pg_catalog.jsonb_typeof({spec}) is distinct from 'object' then
        return 'must be a JSON object';
      end if;
      if {spec} - {known} <> '{}' then  -- the first unknown field in jsonb key order
        return pg_catalog.format('unknown field %L',
          (select k from pg_catalog.jsonb_object_keys({spec} - {known}) k limit 1));
      end if;
      v_problem := case{checks}
      end;
      if v_problem is not null then
        return v_problem;
      end if;
      -- VALUES: the fields with their defaults, now that every type is right
      v_r := pg_catalog.jsonb_populate_record({base}, {given});
      return {values};
    end
    $b$ $f$, '{values}', v_values), '{given}', v_given), '{base}', v_base), '{checks}', v_checks),
      '{known}', v_known), '{spec}', 'p_spec'), '{r}', 'v_r');
  comment on function jobs.spec_problem_of(jsonb) is
    'What is wrong with one job spec, or null (made by jobs.define_spec() from jobs.job).';

  -- jobs.spec_problem(specs) -> the first thing wrong with a batch of specs, or null:
  -- 'spec N: <problem>' for the first spec that has one, and its first problem.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
          pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.spec_problem(p_specs jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = ''
    -- Generic plans: re-planning this statement on every call cost more than running it.
    set plan_cache_mode = force_generic_plan
    as $b$
    begin
      if p_specs is null or pg_catalog.jsonb_typeof(p_specs) <> 'array' then
        return 'specs must be a JSON array of job specs';
      end if;
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        return 'spec 1: ' || jobs.spec_problem_of(p_specs->0);
      end if;
      return (
        select pg_catalog.format('spec %s: %s', p.ord, p.problem)
          from (select e.ord, case
              when pg_catalog.jsonb_typeof({spec}) <> 'object' then 'must be a JSON object'
              when {spec} - {known} <> '{}' then
                pg_catalog.format('unknown field %L',
                  (select k from pg_catalog.jsonb_object_keys({spec} - {known}) k limit 1)){checks}
              else (select {values}
                      -- (offset 0: the record is made once, not once per field read)
                      from (select pg_catalog.jsonb_populate_record({base}, {given}) as r
                            offset 0) x)
            end as problem
              from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
            offset 0) p
         where p.problem is not null
         order by p.ord
         limit 1);
    end
    $b$ $f$, '{values}', v_values), '{given}', v_given), '{base}', v_base), '{checks}', v_checks),
      '{known}', v_known), '{spec}', 'e.spec'), '{r}', '(x.r)');
  comment on function jobs.spec_problem(jsonb) is
    'The first problem in a jsonb array of job specs, or null when all are valid. Reads no table.';

  -- jobs.insert_jobs(specs, now, ids) -> (ord, id, queue, run_at) per job it created.
  -- Inserts every spec (already checked) as a ready job, in (name, tenant, key) order so
  -- two batches that share keys wait for each other instead of deadlocking; a key that
  -- has a job (or that an earlier spec of the batch takes) is skipped, not answered.
  -- ids: the id of each spec (the relay's staged rows); null: from jobs.job_id_seq.
  execute pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace($f$
    create or replace function jobs.insert_jobs(p_specs jsonb, p_now timestamptz,
                                                p_ids bigint[] default null)
    returns table (ord integer, id bigint, queue text, run_at timestamptz)
    language plpgsql volatile set search_path = ''
    -- PL/pgSQL, not SQL: its plan is kept for the session instead of made on every call.
    set plan_cache_mode = force_generic_plan
    as $b$
    declare
      v_base jobs.job_spec := pg_catalog.jsonb_populate_record(null::jobs.job_spec, {defaults});
      v_r    jobs.job_spec;
    begin
      -- ONE SPEC (most calls): one row, without the batch statement's set-up.
      if pg_catalog.jsonb_array_length(p_specs) = 1 then
        v_r := pg_catalog.jsonb_populate_record(v_base,
                 case when p_specs->0 @? '$.* ? (@ == null)' then jobs.spec_given(p_specs->0)
                      else p_specs->0 end);
        insert into jobs.job as j (id, {columns}, run_at, created_at)
        values (coalesce(p_ids[1], pg_catalog.nextval('jobs.job_id_seq')), {values1},
                coalesce(v_r.run_at, p_now + pg_catalog.make_interval(
                  secs => coalesce(v_r.delay_s, v_r.debounce_s, 0))),
                p_now)
        on conflict do nothing  -- the key, or a singleton's or debounced job's group
        returning j.id, j.queue, j.run_at into id, queue, run_at;
        if found then
          ord := 1;
          return next;
        end if;
        return;
      end if;
      -- A BATCH: one statement.
      return query
      with s as materialized (
        select e.ord::integer as ord,
               pg_catalog.jsonb_populate_record(v_base,
                 case when e.spec @? '$.* ? (@ == null)' then jobs.spec_given(e.spec)
                      else e.spec end) as r
          from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      ), mixed as (
        -- Whether the batch spans several (name, tenant). Usually it does not, and then
        -- key order is (name, tenant, key) order: sorting by key alone is far cheaper.
        select exists (select from s, (select (s1.r).name, (s1.r).tenant from s as s1 limit 1) f
                        where (s.r).name <> f.name
                           or coalesce((s.r).tenant, '') <> coalesce(f.tenant, '')) as yes
      ), sorted as materialized (
        -- in lock order, the ids drawn in that order too
        select o.ord, coalesce(p_ids[o.ord], pg_catalog.nextval('jobs.job_id_seq')) as id, o.r
          from (select s.ord, s.r
                  from s
                 order by case when (select mixed.yes from mixed) then (s.r).name end,
                          case when (select mixed.yes from mixed) then coalesce((s.r).tenant, '') end,
                          (s.r).key, s.ord) o
      ), ins as (
        insert into jobs.job as j (id, {columns}, run_at, created_at)
        select s.id, {values},
               coalesce((s.r).run_at, p_now + pg_catalog.make_interval(
                 secs => coalesce((s.r).delay_s, (s.r).debounce_s, 0))),
               p_now
          from sorted s
        on conflict do nothing  -- the key, or a singleton's or debounced job's group
        returning j.id, j.queue, j.run_at
      )
      select s.ord, ins.id, ins.queue, ins.run_at from ins join sorted s on s.id = ins.id;
    end
    $b$ $f$, '{defaults}', pg_catalog.quote_literal(v_defaults) || '::jsonb'),
      '{columns}', (select pg_catalog.string_agg(pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c)),
      '{values}', (select pg_catalog.string_agg('(s.r).' || pg_catalog.quote_ident(c), ', ')
                     from pg_catalog.unnest(v_columns) c)),
      '{values1}', (select pg_catalog.string_agg('v_r.' || pg_catalog.quote_ident(c), ', ')
                      from pg_catalog.unnest(v_columns) c));
  comment on function jobs.insert_jobs(jsonb, timestamp with time zone, bigint[]) is
    'Private: the one insert of jobs (made by jobs.define_spec()).';
end
$function$;

-- changed: jobs.enqueue_many(jsonb)
CREATE OR REPLACE FUNCTION jobs.enqueue_many(p_specs jsonb)
 RETURNS TABLE(ord integer, id bigint, outcome text)
 LANGUAGE plpgsql
 SET search_path TO ''
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now      timestamptz := jobs.now();
  v_dup      text;
  v_strict   boolean;
  v_ids      bigint[];   -- per spec, in input order: the job that answers it
  v_created  boolean[];  -- per spec: whether it created that job
  v_wake     text[];
  v_spec     jsonb;
  v_id       bigint;
  v_queue    text;
  v_run_at   timestamptz;
  v_try      integer;
begin
  -- GUARD: every refusal happens here, before the first write.
  perform jobs.check_specs(p_specs);

  -- Throttled jobs: make the claim enforce their rates (sql/35_limits.sql).
  if p_specs @? '$[*].throttle_n ? (@ != null)' then
    insert into jobs.limit (name, scope, updated_at)
    values ('sqljobs.throttle', 'throttle', v_now)
    on conflict (name) do nothing;
  end if;

  -- ONE SPEC (jobs.enqueue, most client calls): the same steps for one row, without the
  -- batch statements' set-up.
  if pg_catalog.jsonb_array_length(p_specs) = 1 then
    v_spec := p_specs->0;
    v_strict := v_spec->>'on_conflict' = 'error';
    if v_strict then
      perform jobs.refuse_duplicate(1, jobs.job_of_key(v_spec->>'name', v_spec->>'tenant',
                                                       v_spec->>'key'), v_spec->>'key');
    end if;
    ord := 1;
    -- (a job of a debounced or singleton group that starts or ends meanwhile frees the
    -- group: then try again)
    for v_try in 1..3 loop
      if v_spec->>'debounce_s' is not null then
        id := jobs.debounce(v_spec, v_now);
        if id is not null then
          outcome := 'debounced';
          return next;
          return;
        end if;
      end if;
      select c.id, c.queue, c.run_at into v_id, v_queue, v_run_at
        from jobs.insert_jobs(p_specs, v_now) c;
      if v_id is not null then
        if v_run_at <= v_now then
          perform jobs.wake(array[v_queue]);  -- WAKE: runnable now
        end if;
        id := v_id;
        outcome := 'created';
        return next;
        return;
      end if;
      -- The key has a job: an existing one, or one a concurrent transaction committed
      -- first (this later statement sees it). Or its group has a live singleton.
      id := jobs.job_of_key(v_spec->>'name', v_spec->>'tenant', v_spec->>'key');
      if v_strict then
        perform jobs.refuse_duplicate(1, id, v_spec->>'key');
      end if;
      id := coalesce(id, case when v_spec->>'debounce_s' is null then jobs.job_of_group(v_spec) end);
      if id is not null then
        outcome := 'deduped';
        return next;
        return;
      end if;
    end loop;
    perform jobs.raise_error('invalid_argument',
      'spec 1: its group changed under three tries in a row; enqueue it again');
  end if;

  -- A BATCH with debounced specs: one at a time (each may collapse into a waiting job).
  if p_specs @? '$[*].debounce_s ? (@ != null)' then
    return query
      select e.ord::integer, m.id, m.outcome
        from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
       cross join lateral jobs.enqueue_many(pg_catalog.jsonb_build_array(e.spec)) m
       order by e.ord;
    return;
  end if;

  -- A BATCH
  v_strict := p_specs @? '$[*] ? (@.on_conflict == "error")';
  if v_strict then
    perform jobs.refuse_duplicate(e.ord, e.id, e.key)
       from (select e.ord, e.spec->>'key' as key,
                    jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key') as id
               from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
              where e.spec->>'on_conflict' = 'error') e
      where e.id is not null
      order by e.ord
      limit 1;
    -- A strict spec whose key an earlier spec of the same batch already takes.
    select pg_catalog.format('spec %s: key %s is already taken by spec %s of this batch',
                             e.ord, pg_catalog.quote_literal(e.spec->>'key'), f.ord)
      into v_dup
      from pg_catalog.jsonb_array_elements(p_specs) with ordinality as e(spec, ord)
      cross join lateral (
        select p.ord
          from pg_catalog.jsonb_array_elements(p_specs) with ordinality as p(spec, ord)
         where p.ord < e.ord and p.spec->>'name' = e.spec->>'name'
           and p.spec->>'key' = e.spec->>'key'
           and coalesce(p.spec->>'tenant', '') = coalesce(e.spec->>'tenant', '')
         limit 1) as f
     where e.spec->>'on_conflict' = 'error'
     order by e.ord
     limit 1;
    if v_dup is not null then
      perform jobs.raise_error('duplicate_job', v_dup);
    end if;
  end if;

  -- WRITE: one insert for the whole batch. A key repeated in the batch is created by
  -- its first spec; the repeats answer that job as deduped.
  with created as (select c.ord, c.id, c.queue, c.run_at from jobs.insert_jobs(p_specs, v_now) c)
  select pg_catalog.array_agg(c.id order by u.ord),
         pg_catalog.array_agg(c.id is not null order by u.ord),
         (select pg_catalog.array_agg(distinct w.queue) from created w where w.run_at <= v_now)
    into v_ids, v_created, v_wake
    from pg_catalog.generate_series(1, pg_catalog.jsonb_array_length(p_specs)) as u(ord)
    left join created c on c.ord = u.ord;

  -- Specs the insert did not take: their key had a job already, or a concurrent
  -- transaction committed one first. This later statement sees it: answer that job.
  if pg_catalog.array_position(v_created, false) is not null then
    v_ids := array(
      select coalesce(e.id, jobs.job_of_key(e.spec->>'name', e.spec->>'tenant', e.spec->>'key'),
                      jobs.job_of_group(e.spec))
        from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids))
             with ordinality as e(spec, id, ord)
       order by e.ord);
    -- A key that met a concurrent insert after the guard: still refuse when asked to.
    if v_strict then
      perform jobs.refuse_duplicate(e.ord, e.id, e.spec->>'key')
         from rows from (pg_catalog.jsonb_array_elements(p_specs), pg_catalog.unnest(v_ids),
                         pg_catalog.unnest(v_created)) with ordinality as e(spec, id, created, ord)
        where e.spec->>'on_conflict' = 'error' and not e.created and e.id is not null
        order by e.ord
        limit 1;
    end if;
  end if;

  -- WAKE: once per queue.
  perform jobs.wake(v_wake);

  -- ANSWER: one row per spec, in input order.
  return query
    select u.ord::integer, u.id, case when u.created then 'created' else 'deduped' end
      from rows from (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created))
           with ordinality as u(id, created, ord)
     order by u.ord;
end
$function$;

-- changed: jobs.error_codes()
CREATE OR REPLACE FUNCTION jobs.error_codes()
 RETURNS TABLE(sqlstate text, name text, meaning text)
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO ''
AS $function$
  values
    ('SJ001', 'invalid_argument',    'an argument is missing, malformed or out of range'),
    ('SJ002', 'payload_too_large',   'a payload is larger than jobs.max_payload_bytes()'),
    ('SJ003', 'duplicate_job',       'on_conflict = ''error'' and the key already has a job'),
    ('SJ004', 'lease_lost',          'the claim token or running state no longer holds'),
    ('SJ005', 'queues_required',     'jobs.claim was given no queue'),
    ('SJ006', 'job_not_found',       'no job has that id'),
    ('SJ007', 'job_not_requeueable', 'the job succeeded; a success is not run again'),
    ('SJ008', 'job_live',            'the job is still live (ready, running, parked or interrupted)'),
    ('SJ009', 'job_running',         'a worker is running the job'),
    ('SJ010', 'job_finished',        'the job already reached a final state'),
    ('SJ011', 'reserved_step_name',  'step names starting with sqljobs. are the runtime''s own'),
    ('SJ012', 'key_busy',            'another run held the key, and the job said when_busy = fail'),
    ('SJ013', 'limit_not_found',     'no limit has that name'),
    ('SJ014', 'invalid_retention',   'a retention age is negative or not a number, or a batch is below 1'),
    ('SJ015', 'unknown_retention_key', 'a retention policy key is not succeeded, failed, dead, cancelled, awaited or events'),
    ('SJ016', 'job_type_not_found',  'no job type has that name'),
    ('SJ017', 'invalid_job_type',    'a job type definition is refused: unknown field, bad value or bad path'),
    ('SJ030', 'not_leader',          'the leader token does not hold the live lease'),
    ('SJ031', 'schedule_not_found',  'no schedule has that name')
$function$;

-- changed: jobs.insert_jobs(jsonb,timestamp with time zone,bigint[]): made by `select jobs.define_spec();`

-- changed: jobs.leader_acquire(text,text,double precision)
CREATE OR REPLACE FUNCTION jobs.leader_acquire(p_role text, p_holder text, p_lease_s double precision)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  return jobs.lease_acquire(p_role, p_holder, p_lease_s);
end
$function$;

-- changed: jobs.leader_release(text,text,bigint)
CREATE OR REPLACE FUNCTION jobs.leader_release(p_role text, p_holder text, p_token bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
begin
  return jobs.lease_release(p_role, p_holder, p_token);
end
$function$;

-- changed: jobs.leaders()
CREATE OR REPLACE FUNCTION jobs.leaders()
 RETURNS TABLE(role text, holder text, token bigint, lease_expires_at timestamp with time zone, acquired_at timestamp with time zone, live boolean)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select l.name, l.holder, l.token, l.lease_expires_at, l.acquired_at, l.live
    from jobs.leases() l
$function$;

-- changed: jobs.lease_lost(bigint,bigint)
CREATE OR REPLACE FUNCTION jobs.lease_lost(p_id bigint, p_claim bigint)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
declare
  v_state jobs.job_state;
  v_claim bigint;
begin
  select j.state, j.claim into v_state, v_claim from jobs.job j where j.id = p_id;
  perform jobs.raise_error('lease_lost',
    pg_catalog.format('job %s is no longer held by claim %s', p_id, p_claim),
    case when v_state is null then 'the job no longer exists'
         else pg_catalog.format('the job is in state %s, claim %s', v_state, v_claim) end,
    'another worker may have taken it over after the lease lapsed; this run must stop');
end
$function$;

-- changed: jobs.nack_many(bigint[],bigint[],jsonb[],text[],double precision[])
CREATE OR REPLACE FUNCTION jobs.nack_many(p_ids bigint[], p_claims bigint[], p_errors jsonb[] DEFAULT NULL::jsonb[], p_modes text[] DEFAULT NULL::text[], p_delays_s double precision[] DEFAULT NULL::double precision[])
 RETURNS TABLE(id bigint, ok boolean, state jobs.job_state)
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_now     timestamptz := jobs.now();
  v_n       integer;
  v_bad     text;
  v_done    bigint[];
  v_states  jobs.job_state[];
  v_watched bigint[];
begin
  perform jobs.check_batch(p_ids, p_claims, p_errors);
  v_n := pg_catalog.cardinality(p_ids);
  if (p_modes is not null and pg_catalog.cardinality(p_modes) <> v_n)
     or (p_delays_s is not null and pg_catalog.cardinality(p_delays_s) <> v_n) then
    perform jobs.raise_error('invalid_argument', 'modes and delays_s must match ids in length');
  end if;
  select m into v_bad from pg_catalog.unnest(p_modes) m
   where m not in ('retry', 'fail', 'park', 'shed', 'interrupt') limit 1;
  if v_bad is not null then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('mode %s is not one of retry, fail, park, shed, interrupt',
                        pg_catalog.quote_literal(v_bad)));
  end if;
  if exists (select 1 from pg_catalog.unnest(p_delays_s) d where d < 0 or d >= 'Infinity') then
    perform jobs.raise_error('invalid_argument', 'delays_s must be finite and not negative');
  end if;

  with input as (
      select u.id, u.claim, u.error, coalesce(u.mode, 'retry') as mode, u.delay_s, u.ord
        from unnest(
               p_ids, p_claims,
               coalesce(p_errors, pg_catalog.array_fill(null::jsonb, array[v_n])),
               coalesce(p_modes, pg_catalog.array_fill(null::text, array[v_n])),
               coalesce(p_delays_s, pg_catalog.array_fill(null::double precision, array[v_n])))
             with ordinality as u(id, claim, error, mode, delay_s, ord)
    ),
    target as (
      select j.id, i.error, i.mode, i.delay_s, j.attempt, n.next_state,
             n.next_state in ('failed', 'dead') and j.compensable and not j.compensating
               as unwinds,
             case
               when i.mode = 'retry' then
                 v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s,
                   jobs.backoff_s(j.attempt, j.retry_base_s, j.retry_cap_s, j.retry_jitter)))
               when i.mode = 'park' then
                 coalesce(v_now + pg_catalog.make_interval(secs => i.delay_s), 'infinity')
               -- an interrupted run keeps its place in line (its run_at), like a
               -- recovered one, unless the caller asks for a delay
               when i.mode = 'interrupt' and i.delay_s is null then least(j.run_at, v_now)
               else v_now + pg_catalog.make_interval(secs => coalesce(i.delay_s, 0))
             end as next_run_at
        from input i
        join jobs.job j on j.id = i.id and j.claim = i.claim and j.state = 'running'
       cross join lateral (select case
                                    when i.mode = 'fail' then 'failed'
                                    when i.mode = 'park' then 'parked'
                                    when i.mode = 'shed' then 'ready'
                                    when i.mode = 'interrupt' then 'interrupted'
                                    else jobs.retry_state(j.attempt, j.max_attempts, j.dead_letter)
                                  end::jobs.job_state as next_state) n
       order by j.id
         for update of j
    ),
    done as (
      update jobs.job as j
         set state = case when t.unwinds then j.state else t.next_state end,
             run_at = case when not t.unwinds and t.next_state in ('ready', 'parked', 'interrupted')
                           then t.next_run_at else j.run_at end,
             attempt = case when t.mode in ('park', 'shed', 'interrupt')
                            then j.attempt - 1 else j.attempt end,
             lease_expires_at = case when t.unwinds then j.lease_expires_at end,
             finished_at = case when not t.unwinds and t.next_state in ('failed', 'dead')
                                then v_now end,
             compensating = j.compensating or t.unwinds,
             step_seq = j.step_seq + case when t.unwinds then 1 else 0 end,
             last_error = case when t.error is null then j.last_error
                               else case when pg_catalog.jsonb_typeof(t.error) = 'object' then t.error
                                         else pg_catalog.jsonb_build_object('message', t.error) end
                                    || pg_catalog.jsonb_build_object('attempt', t.attempt, 'at', v_now)
                          end
        from target t
       where j.id = t.id
      returning j.id, j.state, j.settle_watched, t.unwinds, j.step_seq, t.next_state, t.error
    ),
    unwound as (
      -- record the final state of each job that starts unwinding (sagas, above)
      select jobs.record_unwinds(pg_catalog.array_agg(done.id), pg_catalog.array_agg(done.step_seq),
                                 pg_catalog.array_agg(done.next_state),
                                 pg_catalog.array_agg(done.error))
        from done where done.unwinds
    )
  select pg_catalog.array_agg(done.id), pg_catalog.array_agg(done.state),
         pg_catalog.array_agg(done.id) filter (
           where done.settle_watched and done.state in ('failed', 'dead'))
    into v_done, v_states, v_watched
    from done, (select pg_catalog.count(*) from unwound) as u;
  -- NOTIFY result waiters of watched jobs that reached a final state (once per call).
  perform jobs.notify_settled(v_watched);
  return query
    select u.id, d.id is not null, d.state
      from unnest(p_ids) with ordinality as u(id, ord)
      left join unnest(v_done, v_states) as d(id, state) on d.id = u.id
     order by u.ord;
end
$function$;

-- changed: jobs.queue_stats()
CREATE OR REPLACE FUNCTION jobs.queue_stats()
 RETURNS TABLE(queue text, paused boolean, ready bigint, running bigint, parked bigint, interrupted bigint, succeeded bigint, failed bigint, dead bigint, cancelled bigint, oldest_ready_s double precision, unserved bigint, limited bigint)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  with unserved as (
    select u.queue, pg_catalog.sum(u.waiting)::bigint as waiting
      from jobs.unserved_jobs() u
     group by u.queue
  ),
  full_limits as (  -- global and queue limits with no free slot (sql/35_limits.sql)
    select l.scope, l.target
      from jobs.limit l
     where l.scope in ('global', 'queue') and l.concurrency is not null
       and l.concurrency <= (select pg_catalog.count(*) from jobs.slot s
                              where s.grp = l.name || '|')
  ),
  held as (
    select exists (select from full_limits f where f.scope = 'global') as everywhere,
           array(select f.target from full_limits f where f.scope = 'queue') as queues
  ),
  counts as (
    select j.queue,
           pg_catalog.count(*) filter (where j.state = 'ready') as ready,
           pg_catalog.count(*) filter (where j.state = 'running') as running,
           pg_catalog.count(*) filter (where j.state = 'parked') as parked,
           pg_catalog.count(*) filter (where j.state = 'interrupted') as interrupted,
           pg_catalog.count(*) filter (where j.state = 'succeeded') as succeeded,
           pg_catalog.count(*) filter (where j.state = 'failed') as failed,
           pg_catalog.count(*) filter (where j.state = 'dead') as dead,
           pg_catalog.count(*) filter (where j.state = 'cancelled') as cancelled,
           pg_catalog.min(j.run_at) filter (where j.state in ('ready', 'interrupted')
                                              and j.run_at <= jobs.now()
                                              and j.blocked_on is null) as oldest_ready_at,
           pg_catalog.count(*) filter (where j.state in ('ready', 'interrupted')
                                         and (j.blocked_on is not null
                                              or (j.deferred_by is not null
                                                  and j.run_at > jobs.now())
                                              or (j.run_at <= jobs.now()
                                                  and (h.everywhere or j.queue = any (h.queues)))
                                             )) as limited
      from jobs.job j cross join held h
     group by j.queue
  ),
  names as (
    select c.queue from counts c union select q.name from jobs.queue q
  )
  select n.queue, coalesce(q.paused, false),
         coalesce(c.ready, 0), coalesce(c.running, 0), coalesce(c.parked, 0),
         coalesce(c.interrupted, 0), coalesce(c.succeeded, 0), coalesce(c.failed, 0),
         coalesce(c.dead, 0), coalesce(c.cancelled, 0),
         coalesce(extract(epoch from jobs.now() - c.oldest_ready_at)::double precision, 0),
         coalesce(u.waiting, 0), coalesce(c.limited, 0)
    from names n
    left join counts c on c.queue = n.queue
    left join jobs.queue q on q.name = n.queue
    left join unserved u on u.queue = n.queue
   order by n.queue
$function$;

-- changed: jobs.schedule_fire(text,timestamp with time zone[],timestamp with time zone,bigint)
CREATE OR REPLACE FUNCTION jobs.schedule_fire(p_name text, p_occurrences timestamp with time zone[], p_watermark timestamp with time zone, p_token bigint)
 RETURNS TABLE(occurrence timestamp with time zone, job_id bigint, outcome text)
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_now     timestamptz := jobs.now();
  v_live    boolean;
  v_s       record;
  v_due     timestamptz[];
  v_specs   jsonb;
begin
  -- GUARD: the leader lease, held for share until commit.
  select l.holder is not null and l.lease_expires_at > v_now and l.token = p_token
    into v_live
    from jobs.lease l
   where l.name = 'scheduler'
     for share;
  if not coalesce(v_live, false) then
    perform jobs.raise_error('not_leader',
      pg_catalog.format('token %s does not hold the live scheduler lease', p_token),
      null, 'stop dispatching and acquire the lease again (jobs.leader_acquire)');
  end if;
  if p_watermark is null or p_watermark > v_now then
    perform jobs.raise_error('invalid_argument', 'the watermark must be given and not in the future');
  end if;
  if exists (select 1 from pg_catalog.unnest(p_occurrences) o(at)
              where o.at is null or o.at > p_watermark) then
    perform jobs.raise_error('invalid_argument',
      'occurrences must be given, and at or before the watermark (never in the future)');
  end if;

  -- LOCK: the schedule.
  select s.name, s.job_name, s.options, s.payload, s.paused, s.watermark
    into v_s
    from jobs.schedule s
   where s.name = p_name
     for update;
  if not found then
    perform jobs.raise_error('schedule_not_found', pg_catalog.format('no schedule named %L', p_name));
  end if;
  if v_s.paused then
    return;
  end if;

  -- FIRE: occurrences after the watermark, oldest first.
  select pg_catalog.array_agg(distinct o.at order by o.at)
    into v_due
    from pg_catalog.unnest(p_occurrences) o(at)
   where o.at > v_s.watermark;
  if v_due is not null then
    select pg_catalog.jsonb_agg(
             v_s.options || pg_catalog.jsonb_build_object(
               'name', v_s.job_name, 'key', jobs.occurrence_key(v_s.name, d.at),
               'payload', v_s.payload, 'run_at', d.at)
             order by d.at)
      into v_specs
      from pg_catalog.unnest(v_due) d(at);
  end if;

  -- MOVE: the watermark, in this transaction.
  update jobs.schedule s
     set watermark = greatest(s.watermark, p_watermark),
         last_fired_at = coalesce(v_due[pg_catalog.array_length(v_due, 1)], s.last_fired_at)
   where s.name = p_name;

  if v_specs is not null then
    return query
      select v_due[e.ord], e.id, e.outcome
        from jobs.enqueue_many(v_specs) e
       order by e.ord;
  end if;
end
$function$;

-- changed: jobs.schema_version()
CREATE OR REPLACE FUNCTION jobs.schema_version()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO ''
AS $function$ select 2 $function$;

-- changed: jobs.spec_defaults(): made by `select jobs.define_spec();`

-- changed: jobs.spec_fields(): made by `select jobs.define_spec();`

-- changed: jobs.spec_problem(jsonb): made by `select jobs.define_spec();`

-- changed: jobs.spec_problem_of(jsonb): made by `select jobs.define_spec();`

-- ---------------------------------------------------------------------------
-- The spec, read off jobs.job again (its new fields), and the trigger that frees a
-- limit's slot when a running job leaves running.
-- ---------------------------------------------------------------------------
select jobs.define_spec();

create trigger job_slots_freed
  after update on jobs.job
  referencing old table as old_jobs new table as new_jobs
  for each statement
  execute function jobs.slots_freed();

-- jobs.job_view redacts (sql/92_introspection.sql): after the functions it calls.
create or replace view jobs.job_view as
  select j.id, j.name, j.queue, j.tenant, j.key, j.state, j.priority, j.run_at, j.attempt,
         j.max_attempts, j.retry_base_s, j.retry_cap_s, j.retry_jitter, j.dead_letter,
         j.timeout_s, j.claim, j.lease_expires_at, j.worker,
         jobs.redact_job_output(j.progress, j.payload, t.sensitive_paths) as progress,
         jobs.redact_job_output(j.last_error, j.payload, t.sensitive_paths) as last_error,
         jobs.redact_job_output(j.result, j.payload, t.sensitive_paths) as result,
         j.traceparent, j.created_at, j.started_at, j.finished_at,
         jobs.redact_payload(j.payload, t.sensitive_paths) as payload,
         j.parent_id, j.parent_step
    from jobs.job j
    left join jobs.job_type t on t.name = j.name;
comment on function jobs.job_detail(bigint) is 'One job as JSON, redacted: its job_view row, steps, children and open event waits (null when missing).';
comment on function jobs.job_payload(bigint) is 'The payload of one job, NOT redacted (null when it does not exist): grant it only to whom may read secrets.';
comment on function jobs.job_type_problem(text,jsonb) is 'Why a job type definition is refused (null when it is fine).';
comment on function jobs.job_type_put(text,jsonb) is 'Register (or replace) a job type and its sensitive and personal paths; true when it is new. SJ017 when refused.';
comment on function jobs.job_type_remove(text) is 'Remove a job type (its jobs then show no payload). SJ016 when there is none.';
comment on function jobs.job_types() is 'Every registered job type with its sensitive and personal paths.';
comment on function jobs.lease_acquire(text,text,double precision) is 'Take or renew a named lease; answers its fencing token, or null while another holds it.';
comment on function jobs.lease_holds(text,bigint) is 'True while the token holds the live lease; locks it for share so a fenced write commits first.';
comment on function jobs.lease_release(text,text,bigint) is 'Give up a lease (fenced on holder and token).';
comment on function jobs.lease_renew(text,text,bigint,double precision) is 'Extend a lease the caller holds under its token; false once another holder took it.';
comment on function jobs.leases() is 'Named leases and whether each is live.';
comment on function jobs.limit_gauges() is 'Per limit: jobs.limit_stats() summed over its groups (groups, running, concurrency per group, waiting, deferred, recent starts).';
comment on function jobs.limit_put(text,jsonb) is 'Define (or replace) a concurrency and/or rate limit; true when it is new.';
comment on function jobs.limit_remove(text) is 'Remove a limit; the jobs waiting on it become claimable. SJ013 when there is none.';
comment on function jobs.limit_stats() is 'Per limit group in use: concurrency and running, waiting jobs, rate and recent starts.';
comment on function jobs.limits() is 'The concurrency and rate limits, as defined.';
comment on function jobs.list_jobs(jsonb,bigint,integer) is 'A page of jobs, newest first, redacted; filter by state, queue, name, tenant, key and times; keyset by after_id.';
comment on function jobs.personal_data() is 'Job types whose payload holds personal data: their paths and how many jobs are stored.';
comment on function jobs.purge(integer,boolean,jsonb) is 'Retention: delete at most p_max finished jobs (with their steps, waits, outbox rows) and old events; answers deleted and still eligible.';
comment on function jobs.purge_cutoff(timestamp with time zone,double precision) is 'now - age, or -infinity when the age is forever (jobs.purge).';
comment on function jobs.purge_unreferenced(bigint,bigint) is 'True when no live job refers to this one (no live child, no live parent): jobs.purge''s reference rule.';
comment on function jobs.queue_gauges() is 'Per queue, from the live rows'' indexes: ready (due), scheduled (future), running, parked, dead, blocked on a limit, oldest ready age in seconds, and demand (running + due jobs a worker could take).';
comment on function jobs.queue_stats() is 'Per queue: paused, counts by state, age in seconds of the oldest runnable job, how many waiting jobs no live worker declares (unserved), and how many wait on a limit (limited).';
comment on function jobs.redact(text,jsonb) is 'The payload of a job of this name as views show it: sensitive paths "[redacted]" (all of it for an unknown name).';
comment on function jobs.redact_at(jsonb,text[]) is 'A JSON value with the value at one path (as steps) replaced by "[redacted]".';
comment on function jobs.redact_job_output(jsonb,jsonb,text[]) is 'A job output (progress, last_error, result) with the sensitive values of its payload at the paths replaced.';
comment on function jobs.redact_output(text,jsonb,jsonb) is 'A value a job produced (error, result, progress) with the sensitive values of its payload replaced.';
comment on function jobs.redact_payload(jsonb,text[]) is 'A payload with the value at each path "[redacted]"; all of it when the paths are null (unknown type).';
comment on function jobs.redact_strings(jsonb,text[]) is 'A JSON value with every secret replaced inside its strings (and a number equal to one).';
comment on function jobs.redact_text(text,text[]) is 'A text with every one of the secrets replaced by [redacted].';
comment on function jobs.redaction_jsonpath(text) is 'A redaction path as the strict jsonpath of every scalar under it.';
comment on function jobs.redaction_path_problem(text) is 'Why a text is not a redaction path (null when it is one).';
comment on function jobs.redaction_path_steps(text) is 'A redaction path as its steps: ''items[].ssn'' -> {items,[],ssn}.';
comment on function jobs.redaction_secrets(jsonb,text[]) is 'The sensitive values (as text, 3 characters or more, longest first) a payload holds at the paths.';
comment on function jobs.retention_age(jsonb,text) is 'Read one retention age: null inherits, "forever" is Infinity, else seconds >= 0 (SJ014 otherwise).';
comment on function jobs.retention_check(jsonb,boolean) is 'Refuse a malformed retention policy: SJ015 for an unknown key, SJ014 for a bad value.';
comment on function jobs.retention_defaults() is 'The built-in retention policy: succeeded 1 day, cancelled 7 days, failed and dead 30 days, awaited 1 hour, events 7 days.';
comment on function jobs.retention_policy(jsonb) is 'The retention ages in effect (resolved; Infinity = forever): ''*'' and each overridden queue.';
comment on function jobs.retention_put(text,jsonb) is 'Store retention ages for a queue (or ''*'', every queue); keys not given are kept.';
comment on function jobs.retention_remove(text) is 'Remove a queue''s stored retention row (or ''*''); answers whether one existed.';
comment on function jobs.stats(double precision) is 'Per queue over the last window_s seconds: jobs finished by state, per second, and p50/p95 of enqueue-to-start and of run time; SJ001 for a bad window.';
comment on table jobs."limit" is 'Private: concurrency and rate limits; use jobs.limit_put / limit_remove / limits().';
comment on table jobs.job_type is 'Private: job types and their redaction; use jobs.job_type_put / job_types().';
comment on table jobs.lease is 'Private: named leases; use jobs.lease_acquire / renew / release.';
comment on table jobs.limit_start is 'Private: recent starts of rate-limited groups (sql/35_limits.sql).';
comment on table jobs.retention is 'Private: the retention policy of jobs.purge; use jobs.retention_put / retention_remove / retention_policy.';
comment on table jobs.slot is 'Private: the limit groups running jobs hold (sql/35_limits.sql).';
comment on view jobs.job_view is 'Every job, redacted: sensitive payload paths "[redacted]", their values hidden in progress, last_error and result.';
