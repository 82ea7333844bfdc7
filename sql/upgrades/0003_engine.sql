-- sqljobs schema version 3 (engine): upgrades version 2 in place.
-- Revision sqljobs_0003. The source of every function below is sql/.
--
-- What changes, and why: ...
-- Locks: ... Workers: need not drain / must drain.
--
-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;
-- the functions, views, triggers and comments are generated below it.

-- ---------------------------------------------------------------------------
-- jobs.backfill: the ledger of the backfills (sql/85_factories.sql). A new, empty
-- table: no lock on anything that exists; workers need not drain.
-- ---------------------------------------------------------------------------
create table jobs.backfill (
  environment text        not null,
  name        text        not null,
  scope       text        not null default '',
  tenant      text,
  checksum    text        not null,
  status      text        not null
              check (status in ('running', 'paused', 'completed', 'stalled', 'cancelled')),
  job_id      bigint,
  job_batch   integer     not null default 0,
  batches     bigint      not null default 0,
  rows_done   bigint      not null default 0,
  expected    bigint,
  cursor      jsonb,
  started_by  text        not null,
  started_at  timestamptz not null,
  updated_at  timestamptz not null,
  finished_at timestamptz,
  primary key (environment, name, scope)
);

comment on table jobs.backfill is
  'The backfill ledger: what ran, per environment, name and scope (sql/85_factories.sql).';
