"""What every schema revision runs first, so that sqljobs installs cleanly beside Citus.

sqljobs lives on a Citus coordinator as ordinary local tables, next to the application's
distributed tables (docs/howto-citus.md). Left alone, Citus would copy the `jobs` schema's
functions and roles to every worker node without their tables, where each call fails on
a missing relation. `GUARD` runs before a revision's SQL, in the same transaction, and
does nothing on a server without Citus. With Citus it:

  * refuses a worker node (SJ060 citus_worker_node, naming the coordinator): the tables
    are created where the SQL runs, and a worker node's copy would be a second, separate
    queue that the coordinator's workers never see;
  * turns Citus's DDL propagation off, so nothing of the schema is sent to the worker
    nodes, now or when a node is added later; `RELEASE`, run after the revision's SQL,
    sets it back to what it was, so the host application's own migrations that follow
    in the same transaction (Alembic runs a whole upgrade in one) propagate as before;
  * removes the copies an earlier install (before this guard) left on the worker nodes,
    and Citus's record of them, so that a new node does not get them either.

On an install whose tables are distributed (`sqljobs migrate --distributed`,
sqljobs/_schema/distributed.py) it does only the first: there the schema belongs on
every node, and a revision's DDL must reach the shards.

Both are plain SQL (a DO block each), so `sqljobs migrate --sql` and `alembic upgrade --sql`
render it with the revision, and a revision's own SQL (frozen once released) stays as
it was.
"""

from __future__ import annotations

GUARD = """\
-- sqljobs: the Citus guard (sqljobs/_schema/citus.py); does nothing without Citus.
do $citus_guard$
declare
  v_group integer;
  v_coordinator text;
begin
  if not exists (select from pg_catalog.pg_extension where extname = 'citus') then
    return;
  end if;
  execute 'select groupid from pg_catalog.pg_dist_local_group' into v_group;
  if v_group is distinct from 0 then
    execute $q$select pg_catalog.string_agg(nodename || ':' || nodeport, ', ')
                 from pg_catalog.pg_dist_node where groupid = 0$q$ into v_coordinator;
    raise exception using
      errcode = 'SJ060',
      message = 'this database is a Citus worker node; sqljobs lives on the coordinator',
      detail = pg_catalog.format('The coordinator is %s.',
                                 coalesce(v_coordinator, 'not registered here')),
      hint = 'Run sqljobs migrate, and point every sqljobs client, at the coordinator.';
  end if;
  if to_regclass('jobs.job') is not null and exists (
       select from pg_catalog.pg_dist_partition where logicalrelid = to_regclass('jobs.job')) then
    -- distributed (sqljobs/_schema/distributed.py): the revision's DDL must reach the
    -- shards, and the engine's functions stay on every node
    return;
  end if;
  perform pg_catalog.set_config('sqljobs.citus_ddl_propagation',
    pg_catalog.current_setting('citus.enable_ddl_propagation'), true);
  perform pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
  if to_regnamespace('jobs') is not null and exists (
       select from pg_catalog.pg_dist_object
        where classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
          and objid = to_regnamespace('jobs')) then
    perform pg_catalog.run_command_on_workers(
      'set citus.enable_ddl_propagation to off; drop schema if exists jobs cascade');
    delete from pg_catalog.pg_dist_object o
     where (o.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
            and o.objid = to_regnamespace('jobs'))
        or (o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass and o.objid in (
              select p.oid from pg_catalog.pg_proc p
               where p.pronamespace = to_regnamespace('jobs')))
        or (o.classid = 'pg_catalog.pg_type'::pg_catalog.regclass and o.objid in (
              select t.oid from pg_catalog.pg_type t
               where t.typnamespace = to_regnamespace('jobs')));
  end if;
end
$citus_guard$;
"""

RELEASE = """\
-- sqljobs: the Citus guard's end (sqljobs/_schema/citus.py): DDL propagation as it was.
do $citus_release$
begin
  if coalesce(pg_catalog.current_setting('sqljobs.citus_ddl_propagation', true), '') <> '' then
    perform pg_catalog.set_config('citus.enable_ddl_propagation',
      pg_catalog.current_setting('sqljobs.citus_ddl_propagation'), true);
    perform pg_catalog.set_config('sqljobs.citus_ddl_propagation', '', true);
  end if;
end
$citus_release$;
"""


def framed(sql: str) -> str:
    """`sql` (a revision's) between the guard and its release, as applying it runs."""
    return GUARD + sql + "\n" + RELEASE
