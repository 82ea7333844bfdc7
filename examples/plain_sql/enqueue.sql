-- A producer in plain SQL: any service that can run SQL can enqueue sqljobs jobs.
--
--   psql "$SQLJOBS_DSN" -v signup_id=42 -v email=ada@example.com -f examples/plain_sql/enqueue.sql
--
-- It enqueues one welcome mail for a signup and a batch of three report jobs, in one
-- transaction: the jobs exist only if it commits. Running it again creates nothing new:
-- every job has an idempotency key, and a second enqueue with the same key answers the
-- existing job with outcome 'deduped'. The worker that runs `examples.send_welcome` is
-- `sqljobs worker examples.webapp.jobs:app`.

\set ON_ERROR_STOP on

begin;

-- One job: name, idempotency key, payload, options (queue, priority, delay_s, ...).
select id, outcome
  from jobs.enqueue(
         'examples.send_welcome',
         'signup:' || :'signup_id' || ':welcome',
         jsonb_build_object('signup_id', (:'signup_id')::bigint, 'email', :'email'),
         '{"queue": "mail", "max_attempts": 5}');

-- Many jobs in one statement: one result row per spec, in input order.
select ord, id, outcome
  from jobs.enqueue_many(
         (select jsonb_agg(jsonb_build_object(
                   'name', 'examples.daily_report',
                   'key', 'report:' || day::date,
                   'payload', jsonb_build_object('day', day::date),
                   'queue', 'reports'))
            from generate_series(date '2030-01-01', date '2030-01-03', interval '1 day') as day));

commit;
