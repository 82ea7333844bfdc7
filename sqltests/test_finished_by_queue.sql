-- jobs.finished_by_queue(minutes, bucket_minutes) (sql/97_dashboard.sql): jobs finished
-- per bucket and queue by final state, buckets aligned on their length, the window
-- ending with the bucket of the current minute, only non-empty pairs; and
-- jobs.finished_per_minute, its sum over queues per minute with zeros. SJ001 for a bad
-- window or bucket; granted to the reader.
begin;
select plan(13);

set local timezone = 'UTC';
-- (test.finish: sqltests/_helpers.sql)

select has_function('jobs', 'finished_by_queue', array['integer', 'integer'], 'jobs.finished_by_queue exists');
do $$ begin
  perform test.finish('fbq.job', 'old', '{"queue": "q_fa"}', 'succeeded', p_at => '2030-01-01 09:40:00+00');   -- before the window
  perform test.finish('fbq.job', 'a1', '{"queue": "q_fa"}', 'succeeded', p_at => '2030-01-01 09:55:00+00');    -- first bucket's start
  perform test.finish('fbq.job', 'a2', '{"queue": "q_fa"}', 'succeeded', p_at => '2030-01-01 10:01:10+00');
  perform test.finish('fbq.job', 'a3', '{"queue": "q_fa"}', 'failed', p_at => '2030-01-01 10:03:00+00');
  perform test.finish('fbq.job', 'b1', '{"queue": "q_fb"}', 'dead', p_at => '2030-01-01 10:06:00+00');
  perform test.finish('fbq.job', 'b2', '{"queue": "q_fb"}', 'cancelled', p_at => '2030-01-01 10:07:20+00');
  perform test.finish('fbq.job', 'b3', '{"queue": "q_fb"}', 'succeeded', p_at => '2030-01-01 10:07:25+00');
end $$;
set local jobs.fake_now = '2030-01-01 10:07:30+00';

-- 15 minutes in 5-minute buckets: the bucket of 10:07 ends at 10:10, so 09:55 .. 10:10
select results_eq(
  $$ select bucket, queue, succeeded, failed, dead, cancelled from jobs.finished_by_queue(15, 5) $$,
  $$ values ('2030-01-01 09:55:00+00'::timestamptz, 'q_fa', 1::bigint, 0::bigint, 0::bigint, 0::bigint),
            ('2030-01-01 10:00:00+00', 'q_fa', 1, 1, 0, 0),
            ('2030-01-01 10:05:00+00', 'q_fb', 1, 0, 1, 1) $$,
  'per aligned bucket and queue, by final state; empty pairs left out; older jobs outside the window');
select results_eq(
  $$ select bucket, queue, succeeded + failed + dead + cancelled from jobs.finished_by_queue(10, 1) $$,
  $$ values ('2030-01-01 10:01:00+00'::timestamptz, 'q_fa', 1::bigint),
            ('2030-01-01 10:03:00+00', 'q_fa', 1), ('2030-01-01 10:06:00+00', 'q_fb', 1),
            ('2030-01-01 10:07:00+00', 'q_fb', 2) $$,
  'minute buckets: the last 10 minutes, the current one included');
select is((select count(*)::int from jobs.finished_by_queue(1440, 60)), 3,
          'a day in hours: 09:00 (q_fa), 10:00 (q_fa, q_fb)');
select is((select min(bucket) from jobs.finished_by_queue(1440, 60)), '2030-01-01 09:00:00+00'::timestamptz,
          'hour buckets start on the hour');

-- finished_per_minute: the same rows summed per minute, zeros included
select results_eq(
  $$ select minute, succeeded, failed from jobs.finished_per_minute(4) $$,
  $$ values ('2030-01-01 10:04:00+00'::timestamptz, 0::bigint, 0::bigint),
            ('2030-01-01 10:05:00+00', 0, 0), ('2030-01-01 10:06:00+00', 0, 1),
            ('2030-01-01 10:07:00+00', 1, 0) $$,
  'finished_per_minute: per minute over every queue (failed or dead), zeros included, cancelled left out');

-- refusals
select throws_ok($$ select jobs.finished_by_queue(0, 1) $$, 'SJ001', null, 'minutes below 1');
select throws_ok($$ select jobs.finished_by_queue(1441, 1) $$, 'SJ001', null, 'minutes above 1440');
select throws_ok($$ select jobs.finished_by_queue(15, 4) $$, 'SJ001', null, 'a bucket that does not divide the window');
select throws_ok($$ select jobs.finished_by_queue(15, null) $$, 'SJ001', null, 'a null bucket');

-- who may call it
set local role sqljobs_reader;
select lives_ok($$ select jobs.finished_by_queue(60, 5) $$, 'reader: jobs.finished_by_queue');
set local role sqljobs_worker;
select throws_ok($$ select jobs.finished_by_queue(60, 5) $$, '42501', null, 'a worker cannot call it');
reset role;
set local sqljobs.tenant = 'acme';
select throws_ok($$ select jobs.finished_by_queue(60, 5) $$, 'SJ018', null, 'a tenant-bound session is refused');

select * from finish();
rollback;
