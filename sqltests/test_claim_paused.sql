-- jobs.pause_queue / resume_queue: a paused queue keeps accepting jobs but is not
-- claimed from; resumed, it is claimed again. Pausing one queue leaves others alone.
begin;
select plan(14);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "pause.job", "key": "a1", "queue": "q_pause_a", "priority": -1},
  {"name": "pause.job", "key": "b1", "queue": "q_pause_b"}
]') $$, 'setup: a job in each of two queues');

select lives_ok($$ select jobs.pause_queue('q_pause_a') $$, 'pause_queue');
select is((select paused from jobs.queue where name = 'q_pause_a'), true, 'the queue is recorded as paused');
select lives_ok($$ select jobs.pause_queue('q_pause_a') $$, 'pausing a paused queue is harmless');
select is((select outcome from jobs.enqueue('pause.job', 'a2', '{}', '{"queue": "q_pause_a"}')), 'created',
          'a paused queue still accepts jobs');
select results_eq($$ select key from jobs.claim('{q_pause_a,q_pause_b}', 'w', 10, 3600) $$,
                  $$ values ('b1') $$,
                  'a claim over both queues takes only from the unpaused one');
select is((select count(*)::int from jobs.claim('{q_pause_a}', 'w', 10, 3600)), 0,
          'a claim from the paused queue alone answers nothing');
select is((select count(*)::int from jobs.job where queue = 'q_pause_a' and state = 'ready'), 2,
          'its jobs wait, ready');

select lives_ok($$ select jobs.resume_queue('q_pause_a') $$, 'resume_queue');
select is((select paused from jobs.queue where name = 'q_pause_a'), false, 'the queue is recorded as not paused');
select results_eq($$ select key from jobs.claim('{q_pause_a}', 'w', 10, 3600) $$,
                  $$ values ('a1'), ('a2') $$,
                  'resumed, the queue is claimed from again');
select lives_ok($$ select jobs.resume_queue('q_pause_never') $$, 'resuming a queue that was never paused is harmless');

select throws_ok($$ select jobs.pause_queue('') $$, 'SJ001', null, 'pause_queue needs a queue');
select throws_ok($$ select jobs.resume_queue(null) $$, 'SJ001', null, 'resume_queue needs a queue');

select * from finish();
rollback;
