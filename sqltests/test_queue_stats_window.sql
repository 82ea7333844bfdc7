-- jobs.queue_stats() counts succeeded, failed and cancelled jobs that finished within
-- jobs.queue_stats_window (default 24 hours) and reads no older finished row; dead jobs
-- and live ones are counted whatever their age.
begin;
select plan(6);

create schema jobs_test;
create function jobs_test.finish(p_key text, p_state text, p_at timestamptz) returns void
language plpgsql as $$
begin
  perform set_config('jobs.fake_now', p_at::text, true);
  perform jobs.enqueue('qw.job', p_key, '{}', '{"queue": "q_qw", "max_attempts": 1}');
  if p_state = 'cancelled' then
    perform jobs.cancel(j.id) from jobs.job j where j.name = 'qw.job' and j.key = p_key;
    return;
  end if;
  perform case p_state when 'succeeded' then jobs.ack(c.id, c.claim)::text
                       when 'failed' then jobs.nack(c.id, c.claim, null, 'fail')::text
                       else jobs.nack(c.id, c.claim)::text end
     from jobs.claim('{q_qw}', 'w', 1, 30) c;
end $$;

select lives_ok($$ select jobs_test.finish('old-ok', 'succeeded', '2030-01-01 00:00:00+00'),
                          jobs_test.finish('old-fail', 'failed', '2030-01-01 00:00:01+00'),
                          jobs_test.finish('old-cancel', 'cancelled', '2030-01-01 00:00:02+00'),
                          jobs_test.finish('old-dead', 'dead', '2030-01-01 00:00:03+00'),
                          jobs_test.finish('new-ok', 'succeeded', '2030-01-03 00:00:00+00'),
                          jobs_test.finish('new-cancel', 'cancelled', '2030-01-03 00:00:01+00') $$,
                'setup: jobs finished two days apart');
select lives_ok($$ select jobs.enqueue('qw.job', 'live', '{}', '{"queue": "q_qw", "run_at": "2029-12-01T00:00:00Z"}') $$,
                'setup: a job waiting for a month');
set local jobs.fake_now = '2030-01-03 12:00:00+00';

select results_eq($$ select ready, succeeded, failed, dead, cancelled from jobs.queue_stats() where queue = 'q_qw' $$,
                  $$ values (1::bigint, 1::bigint, 0::bigint, 1::bigint, 1::bigint) $$,
                  'the default window (24 hours): only the recent finished jobs; dead and live ones whatever their age');
set local jobs.queue_stats_window = '7 days';
select results_eq($$ select succeeded, failed, dead, cancelled from jobs.queue_stats() where queue = 'q_qw' $$,
                  $$ values (2::bigint, 1::bigint, 1::bigint, 2::bigint) $$,
                  'a wider window (jobs.queue_stats_window) counts the older ones too');
set local jobs.queue_stats_window = '0';
select results_eq($$ select ready, succeeded, failed, dead, cancelled from jobs.queue_stats() where queue = 'q_qw' $$,
                  $$ values (1::bigint, 0::bigint, 0::bigint, 1::bigint, 0::bigint) $$,
                  'a zero window counts no finished job');
set local jobs.queue_stats_window = 'soon';
select throws_ok($$ select * from jobs.queue_stats() $$, '22007', null,
                 'a window that is not an interval is refused by PostgreSQL');

select * from finish();
rollback;
