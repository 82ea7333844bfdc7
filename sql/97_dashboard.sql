-- The dashboard's charts (sqljobs.dashboard): finished jobs per minute. jobs.stats()
-- answers one window as a whole; a chart needs the window cut into minutes.

-- ---------------------------------------------------------------------------
-- jobs.finished_per_minute(minutes) -> one row per minute of the last `minutes`
-- (oldest first, minutes with nothing finished included as zeros): succeeded, and
-- failed (failed or dead: an attempt that ended the job without success). Reads the
-- finished rows of the window through job_finished_idx, as jobs.stats() does.
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
  with finished as (
    select pg_catalog.date_trunc('minute', f.finished_at) as minute, f.state
      from jobs.job f
     where f.finished_at is not null
       and f.finished_at >= v_end - pg_catalog.make_interval(mins => p_minutes)
       and f.finished_at < v_end
       and f.state in ('succeeded', 'failed', 'dead')
  )
  select m.minute,
         pg_catalog.count(f.state) filter (where f.state = 'succeeded'),
         pg_catalog.count(f.state) filter (where f.state in ('failed', 'dead'))
    from pg_catalog.generate_series(v_end - pg_catalog.make_interval(mins => p_minutes),
                                    v_end - interval '1 minute', interval '1 minute') as m(minute)
    left join finished f on f.minute = m.minute
   group by m.minute
   order by m.minute;
end
$$;

comment on function jobs.finished_per_minute(integer) is
  'Per minute of the last N (1..1440, oldest first, zeros included): jobs that succeeded, and that failed or went dead.';
