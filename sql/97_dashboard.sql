-- The dashboard's charts (sqljobs.dashboard): finished jobs over time. jobs.stats()
-- answers one window as a whole; a chart needs the window cut into buckets.

-- ---------------------------------------------------------------------------
-- jobs.finished_by_queue(minutes, bucket_minutes) -> per bucket of `bucket_minutes` of
-- the last `minutes`, and per queue: the jobs that finished in it, by final state
-- (succeeded, failed, dead, cancelled). Buckets are aligned on multiples of their
-- length since the epoch (5 minutes: :00, :05, ...), and the window ends with the
-- bucket holding the current minute (so it is partly ahead of now). Only the (bucket,
-- queue) pairs where something finished are returned, oldest first, then by queue;
-- `bucket` is the bucket's start. Reads the finished rows of the window
-- through job_retention_idx, as jobs.stats() does: its cost follows the throughput
-- times the window. Errors: invalid_argument (SJ001) when minutes is outside 1..1440,
-- or bucket_minutes is not a divisor of minutes.
-- ---------------------------------------------------------------------------
create or replace function jobs.finished_by_queue(p_minutes integer default 60,
                                                  p_bucket_minutes integer default 1)
returns table (bucket timestamptz, queue text, succeeded bigint, failed bigint, dead bigint,
               cancelled bigint)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_end   timestamptz;
  v_start timestamptz;
begin
  perform jobs.fleet_only('jobs.finished_by_queue');  -- (sql/15_tenancy.sql)
  if p_minutes is null or p_minutes not between 1 and 1440 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('minutes must be between 1 and 1440, got %s', p_minutes));
  end if;
  if p_bucket_minutes is null or p_bucket_minutes < 1 or p_minutes % p_bucket_minutes <> 0 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('bucket_minutes must divide minutes (%s), got %s', p_minutes,
                        p_bucket_minutes));
  end if;
  -- the end of the bucket holding the current minute
  v_end := pg_catalog.to_timestamp((pg_catalog.ceil(
             extract(epoch from pg_catalog.date_trunc('minute', jobs.now()) + interval '1 minute')
             / (60 * p_bucket_minutes)) * 60 * p_bucket_minutes)::double precision);
  v_start := v_end - pg_catalog.make_interval(mins => p_minutes);
  return query
  select v_start + pg_catalog.make_interval(mins => f.n * p_bucket_minutes),
         f.queue,
         pg_catalog.count(*) filter (where f.state = 'succeeded'),
         pg_catalog.count(*) filter (where f.state = 'failed'),
         pg_catalog.count(*) filter (where f.state = 'dead'),
         pg_catalog.count(*) filter (where f.state = 'cancelled')
    from (select j.queue, j.state,
                 pg_catalog.floor(extract(epoch from j.finished_at - v_start)
                                  / (60 * p_bucket_minutes))::integer as n
            from jobs.job j
           where j.finished_at is not null
             and j.finished_at >= v_start
             and j.finished_at < v_end
             and j.state in ('succeeded', 'failed', 'dead', 'cancelled')) f
   group by f.n, f.queue
   order by f.n, f.queue;
end
$$;

comment on function jobs.finished_by_queue(integer, integer) is
  'Per bucket of the last N minutes (1..1440; buckets of a divisor of N minutes) and per queue: jobs finished succeeded, failed, dead and cancelled; only pairs with some.';

-- ---------------------------------------------------------------------------
-- jobs.finished_per_minute(minutes) -> one row per minute of the last `minutes`
-- (oldest first, minutes with nothing finished included as zeros): succeeded, and
-- failed (failed or dead: an attempt that ended the job without success), over every
-- queue: jobs.finished_by_queue(minutes, 1) summed per minute.
-- ---------------------------------------------------------------------------
create or replace function jobs.finished_per_minute(p_minutes integer default 60)
returns table (minute timestamptz, succeeded bigint, failed bigint)
language plpgsql
stable
set search_path = ''
as $$
declare
  v_end timestamptz := pg_catalog.date_trunc('minute', jobs.now()) + interval '1 minute';
begin
  perform jobs.fleet_only('jobs.finished_per_minute');  -- (sql/15_tenancy.sql)
  if p_minutes is null or p_minutes not between 1 and 1440 then
    perform jobs.raise_error('invalid_argument',
      pg_catalog.format('minutes must be between 1 and 1440, got %s', p_minutes));
  end if;
  return query
  select m.minute,
         coalesce(pg_catalog.sum(f.succeeded), 0)::bigint,
         coalesce(pg_catalog.sum(f.failed + f.dead), 0)::bigint
    from pg_catalog.generate_series(v_end - pg_catalog.make_interval(mins => p_minutes),
                                    v_end - interval '1 minute', interval '1 minute') as m(minute)
    left join jobs.finished_by_queue(p_minutes, 1) f on f.bucket = m.minute
   group by m.minute
   order by m.minute;
end
$$;

comment on function jobs.finished_per_minute(integer) is
  'Per minute of the last N (1..1440, oldest first, zeros included): jobs that succeeded, and that failed or went dead.';
