-- sqljobs schema version 3 (engine): upgrades version 2 in place.
-- Revision sqljobs_0003. The source of every function below is sql/.
--
-- What changes, and why:
--   * Batch settles and renewals wait at most 50 ms for a busy row (one another
--     transaction holds locked) and answer ok = null for it, so one locked row no
--     longer stalls a worker's whole batch until its other leases lapse (jobs.ack_many,
--     nack_many, heartbeat_many, heartbeat; private jobs.lock_batch, lock_briefly,
--     unwritten_answer, ack_batch, nack_batch).
--   * jobs.channel_token, ack_many and nack_many are PL/pgSQL: a session keeps their
--     plans (as SQL functions they were planned in every transaction).
--   * jobs.recover(queues, limit): the claim's recovery on its own, so a worker with no
--     free slot recovers a crashed peer's lapsed leases without claiming.
-- Locks: function replacements only, no table rewrite: each takes a brief lock on the
-- function's catalog row; no job row is touched. Workers: need not drain. A 0.2 worker
-- reads a busy answer (null) as a lost lease: the job runs again after its lease, as a
-- stalled batch did before; upgrade the workers to 0.3 to retry it instead.
--   * Forks (jobs.fork, jobs.job_forked_from; table jobs.job_fork) and patch markers
--     (jobs.step_put option patch); the claim answers the stored steps' order
--     ('sqljobs.order'), which the 0.3 client checks a replay against.
--
-- The DDL an upgrade needs (tables, columns, indexes, types) goes here by hand;
-- the functions, views, triggers and comments are generated below it.

create table jobs.job_fork (
  job_id      bigint primary key references jobs.job (id) on delete cascade,
  forked_from bigint not null,
  from_step   text not null,
  forked_at   timestamptz not null,
  forked_by   text not null
);
