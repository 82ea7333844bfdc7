"""The installed `jobs` schema as facts read from the catalogs, to compare two installs
and to keep a reviewable snapshot of what `sql/` installs (tools/snapshot.py).

`catalog_snapshot(dsn)` answers every fact about schema `jobs`, by kind, in a stable
order: functions (pg_get_functiondef, including the text jobs.define_spec() writes),
columns, constraints, indexes, triggers, types and enum labels, views, sequences,
grants and comments. It works with any server version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

CATALOG_QUERIES: dict[str, str] = {
    "functions": """
        select p.oid::regprocedure::text, pg_catalog.pg_get_functiondef(p.oid),
               coalesce(p.proconfig, '{}')::text
          from pg_catalog.pg_proc p
         where p.pronamespace = 'jobs'::regnamespace
         order by 1""",
    "columns": """
        select c.relname, c.relkind::text, a.attnum, a.attname,
               pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_catalog.pg_get_expr(d.adbin, d.adrelid), coalesce(c.reloptions, '{}')::text
          from pg_catalog.pg_class c
          join pg_catalog.pg_attribute a on a.attrelid = c.oid and a.attnum > 0
                                        and not a.attisdropped
          left join pg_catalog.pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
         where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'c')
         order by 1, 3""",
    "constraints": """
        select r.conrelid::regclass::text, r.conname, pg_catalog.pg_get_constraintdef(r.oid)
          from pg_catalog.pg_constraint r
         where r.connamespace = 'jobs'::regnamespace
         order by 1, 2""",
    "indexes": """
        select i.indexrelid::regclass::text, pg_catalog.pg_get_indexdef(i.indexrelid)
          from pg_catalog.pg_index i
          join pg_catalog.pg_class c on c.oid = i.indexrelid
         where c.relnamespace = 'jobs'::regnamespace
         order by 1""",
    "types": """
        select t.typname, t.typtype::text,
               coalesce((select pg_catalog.array_agg(e.enumlabel order by e.enumsortorder)
                           from pg_catalog.pg_enum e where e.enumtypid = t.oid), '{}')::text
          from pg_catalog.pg_type t
         where t.typnamespace = 'jobs'::regnamespace
         order by 1""",
    "triggers": """
        select t.tgrelid::regclass::text, t.tgname, pg_catalog.pg_get_triggerdef(t.oid)
          from pg_catalog.pg_trigger t
          join pg_catalog.pg_class c on c.oid = t.tgrelid
         where c.relnamespace = 'jobs'::regnamespace and not t.tgisinternal
         order by 1, 2""",
    "views": """
        select c.relname, pg_catalog.pg_get_viewdef(c.oid)
          from pg_catalog.pg_class c
         where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('v', 'm')
         order by 1""",
    "sequences": """
        select s.sequencename, s.data_type::text, s.start_value, s.increment_by, s.max_value,
               s.cycle
          from pg_catalog.pg_sequences s
         where s.schemaname = 'jobs'
         order by 1""",
    # grants (sql/98_roles.sql): the upgraded database and a fresh one grant the same
    "acls": """
        select c.relname, c.relkind::text, coalesce(c.relacl::text, '')
          from pg_catalog.pg_class c
         where c.relnamespace = 'jobs'::regnamespace
        union all
        select p.oid::regprocedure::text, 'function', coalesce(p.proacl::text, '')
          from pg_catalog.pg_proc p
         where p.pronamespace = 'jobs'::regnamespace
        union all
        select n.nspname, 'schema', coalesce(n.nspacl::text, '')
          from pg_catalog.pg_namespace n
         where n.nspname = 'jobs'
         order by 1, 2""",
    "comments": """
        select pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
          from pg_catalog.pg_description d
         where (d.classoid = 'pg_catalog.pg_proc'::regclass
                and d.objoid in (select p.oid from pg_catalog.pg_proc p
                                  where p.pronamespace = 'jobs'::regnamespace))
            or (d.classoid = 'pg_catalog.pg_class'::regclass
                and d.objoid in (select c.oid from pg_catalog.pg_class c
                                  where c.relnamespace = 'jobs'::regnamespace))
            or (d.classoid = 'pg_catalog.pg_type'::regclass
                and d.objoid in (select t.oid from pg_catalog.pg_type t
                                  where t.typnamespace = 'jobs'::regnamespace))
            or (d.classoid = 'pg_catalog.pg_namespace'::regclass
                and d.objoid = 'jobs'::regnamespace)
         order by 1""",
}


def catalog_snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every fact the catalogs hold about schema `jobs`, keyed by kind, in a stable order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {kind: conn.execute(query).fetchall()
                for kind, query in CATALOG_QUERIES.items()}



def run_script(dsn: str, path: Path) -> None:
    """Run a SQL file in one autocommit session, as `psql -f` would (without psql)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(path.read_text(encoding="utf-8"))
