-- sqljobs schema version 3 (engine): upgrades version 2 in place.
-- Revision sqljobs_0003. The source of every function below is sql/.
--
-- What changes, and why: ...
-- Locks: ... Workers: need not drain / must drain.
--
-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;
-- the functions, views, triggers and comments are generated below it.

-- ===========================================================================
-- Generated from sql/ by `make revision`: every function, view, trigger and comment
-- that differs from the previous schema version, as sql/ writes it. Do not edit
-- below this line: edit sql/ and run `make revision` again.
-- ===========================================================================

-- === sql/00_schema.sql ===

-- ---------------------------------------------------------------------------
-- Version. Bump with each schema change that ships a new Alembic revision; the
-- client refuses to run against an older schema (sqljobs/_version.py).
-- ---------------------------------------------------------------------------
create or replace function jobs.schema_version()
returns integer
language sql
immutable
set search_path = ''
as $$ select 3 $$;

-- === sql/98_roles.sql ===

select jobs.install_roles();
