-- jobs.queue_stats() counts succeeded, failed and cancelled jobs that finished within
-- jobs.queue_stats_window (default 24 hours) and reads no older finished row; dead jobs
-- and live ones are counted whatever their age.
begin;
select plan(6);

-- (test.finish: sqltests/_helpers.sql)
select lives_ok($$ select test.finish('qw.job', 'old-ok', '{"queue": "q_qw"}', 'succeeded', p_at => '2030-01-01 00:00:00+00'),
                          test.finish('qw.job', 'old-fail', '{"queue": "q_qw"}', 'failed', p_at => '2030-01-01 00:00:01+00'),
                          test.finish('qw.job', 'old-cancel', '{"queue": "q_qw"}', 'cancelled', p_at => '2030-01-01 00:00:02+00'),
                          test.finish('qw.job', 'old-dead', '{"queue": "q_qw"}', 'dead', p_at => '2030-01-01 00:00:03+00'),
                          test.finish('qw.job', 'new-ok', '{"queue": "q_qw"}', 'succeeded', p_at => '2030-01-03 00:00:00+00'),
                          test.finish('qw.job', 'new-cancel', '{"queue": "q_qw"}', 'cancelled', p_at => '2030-01-03 00:00:01+00') $$,
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
