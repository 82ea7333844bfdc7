-- jobs.claim options.recover: false skips lapsed-lease recovery and parked wake-ups (a
-- worker's claims as slots free); the default (true) does both. A non-boolean is SJ001.
begin;
select plan(7);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
do $$ begin
  perform jobs.enqueue('rec.job', 'lapsed', '{}', '{"queue": "q_rec"}');
  perform jobs.enqueue('rec.job', 'parked', '{}', '{"queue": "q_rec"}');
  perform from jobs.claim('{q_rec}', 'w1', 2, 10);
  perform jobs.nack(x.id, x.claim, null, 'park', 5)
     from (with x as materialized (select j.id, j.claim from jobs.job j where j.key = 'parked')
           select * from x) x;
end $$;
set local jobs.fake_now = '2030-01-01 00:01:00+00';

select is((select count(*)::int from jobs.claim('{q_rec}', 'w2', 10, 10, '{"recover": false}')), 0,
          'recover=false claims nothing: the lapsed lease is not recovered, the parked job not woken');
select is((select state::text from jobs.job where key = 'lapsed'), 'running',
          'the job with the lapsed lease is still running');
select is((select state::text from jobs.job where key = 'parked'), 'parked',
          'the due parked job is still parked');

select is((select count(*)::int from jobs.claim('{q_rec}', 'w2', 10, 10)), 2,
          'the default claim recovers and wakes them, then claims both in the same call');
select results_eq($$ select key, state::text, attempt, worker from jobs.job
                      where name = 'rec.job' order by key $$,
                  $$ values ('lapsed', 'running', 2, 'w2'), ('parked', 'running', 1, 'w2') $$,
                  'both run on w2: the lapsed attempt counted, the park not');

select throws_ok($$ select from jobs.claim('{q_rec}', 'w2', 1, 10, '{"recover": "no"}') $$,
                 'SJ001', null, 'a non-boolean recover is refused');
select throws_ok($$ select from jobs.claim('{q_rec}', 'w2', 1, 10, '{"bogus": true}') $$,
                 'SJ001', null, 'an unknown option is still refused');

select * from finish();
rollback;
