-- The minimal queue table of the pgbench ceilings: what any Postgres queue needs at
-- the least (an id, a queue, a payload, a state, a time) and one partial index on
-- claimable rows. No functions, no checks, no idempotency key.
drop table if exists q;
create table q (
  id      bigserial primary key,
  queue   text not null default 'default',
  payload jsonb not null default '{}',
  state   smallint not null default 0,          -- 0 ready, 1 claimed
  run_at  timestamptz not null default now()
);
create index q_ready_idx on q (queue, id) where state = 0;
