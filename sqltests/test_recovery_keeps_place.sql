-- A job whose run was cut short (a lapsed lease recovered by a claim, or a drain's
-- interrupt nack) keeps its place in line: claimed before the backlog that queued
-- behind it, not after. An interrupt with a delay waits that long instead.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.enqueue('place.job', 'first', '{}', '{"queue": "q_place"}') $$,
                'setup: the first job');
select is((select c.key from jobs.claim('{q_place}', 'w1', 1, 30) c), 'first',
          'setup: w1 claims it with a 30 s lease');
set local jobs.fake_now = '2030-01-01 00:00:10+00';
select lives_ok($$ select count(*) from jobs.enqueue_many((
                    select jsonb_agg(jsonb_build_object('name', 'place.job', 'key', 'b' || i,
                                                        'queue', 'q_place'))
                      from generate_series(1, 5) i)) $$,
                'setup: a backlog of five queued behind it');

-- w1 dies; at 00:01:00 its lease has lapsed
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select results_eq($$ select c.key, c.attempt from jobs.claim('{q_place}', 'w2', 1, 30) c $$,
                  $$ values ('first', 2) $$,
                  'the recovering claim takes the lapsed job first, ahead of the backlog');

-- a drain interrupts b1: it is next again, before b2
select is((select c.key from jobs.claim('{q_place}', 'w3', 1, 30) c), 'b1', 'setup: w3 claims b1');
select lives_ok($$ select jobs.nack(id, claim, '{"kind": "drain"}', 'interrupt')
                     from jobs.job where name = 'place.job' and key = 'b1' $$,
                'setup: w3 drains and interrupts b1');
select results_eq(
  $$ select array_agg(c.key order by c.key) from jobs.claim('{q_place}', 'w4', 2, 30) c $$,
  $$ values (array['b1', 'b2']) $$,
  'the interrupted job is claimed again ahead of the rest of the backlog');

-- an interrupt with a delay waits that long instead
select lives_ok($$ select jobs.nack(c.id, c.claim, null, 'interrupt', 60)
                     from jobs.claim('{q_place}', 'w5', 1, 30) c $$,
                'setup: w5 claims b3 and interrupts it with a 60 s delay');
select results_eq($$ select state, run_at from jobs.job where name = 'place.job' and key = 'b3' $$,
                  $$ values ('interrupted'::jobs.job_state, '2030-01-01 00:02:00+00'::timestamptz) $$,
                  'interrupted with a delay: run_at = now + delay_s');

select * from finish();
rollback;
