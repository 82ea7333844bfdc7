"""A plain-SQL producer: psql (enqueue.sql) and Node.js with `pg` (enqueue.mjs)."""
