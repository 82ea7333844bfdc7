-- jobs.recover(queues, limit): the RECOVER phase of a claim on its own. Lapsed leases go
-- back to ready (attempt counted, place in line kept), due parked jobs wake, nothing is
-- claimed; limit bounds each kind; a bound session recovers its tenant's jobs only.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
do $$ begin
  perform jobs.enqueue('rv.job', 'lapsed1', '{}', '{"queue": "q_rv"}');
  perform jobs.enqueue('rv.job', 'lapsed2', '{}', '{"queue": "q_rv"}');
  perform jobs.enqueue('rv.job', 'parked', '{}', '{"queue": "q_rv"}');
  perform jobs.enqueue('rv.job', 'live', '{}', '{"queue": "q_rv"}');
  perform jobs.enqueue('rv.job', 'other', '{}', '{"queue": "q_rv_other"}');
  perform from jobs.claim('{q_rv,q_rv_other}', 'w1', 5, 10);
  perform jobs.nack(x.id, x.claim, null, 'park', 5)
     from (with x as materialized (select j.id, j.claim from jobs.job j where j.key = 'parked')
           select * from x) x;
end $$;
-- 'live' renews its lease: only the other leases lapse
set local jobs.fake_now = '2030-01-01 00:00:30+00';
select is((with x as materialized (select j.id, j.claim from jobs.job j where j.key = 'live')
           select jobs.heartbeat(x.id, x.claim, 600) from x),
          true, 'the live job renews its lease');
set local jobs.fake_now = '2030-01-01 00:01:00+00';

select is(jobs.recover('{q_rv}', 1), 2,
          'limit 1: one lapsed lease recovered and one due parked job woken');
select is(jobs.recover('{q_rv}'), 1, 'the next call recovers the other lapsed lease');
select is(jobs.recover('{q_rv}'), 0, 'nothing left to recover: 0');
select results_eq($$ select key, state::text, attempt, worker from jobs.job
                      where name = 'rv.job' order by key $$,
                  $$ values ('lapsed1', 'ready', 1, 'w1'), ('lapsed2', 'ready', 1, 'w1'),
                            ('live', 'running', 1, 'w1'), ('other', 'running', 1, 'w1'),
                            ('parked', 'ready', 0, 'w1') $$,
                  'recovered jobs are ready (nothing claimed; a park counted no attempt), the live lease and the queue not named are untouched');
select is((select attempts->0->>'outcome' from jobs.job where key = 'lapsed1'), 'lease_expired',
          'the lapsed attempt joins the history');
select is((select count(*)::int from jobs.claim('{q_rv}', 'w2', 10, 10, '{"recover": false}')), 3,
          'a claim takes the recovered jobs');

-- tenancy: a bound session recovers only its tenant's jobs. A bound role runs on the real
-- clock (jobs.fake_now is the superuser's), so these leases lapse in 2020.
set local jobs.fake_now = '2020-01-01 00:00:00+00';
do $$ begin
  perform jobs.enqueue('rv.job', 't_a', '{}', '{"queue": "q_rv_t", "tenant": "acme"}');
  perform jobs.enqueue('rv.job', 't_b', '{}', '{"queue": "q_rv_t", "tenant": "globex"}');
  perform from jobs.claim('{q_rv_t}', 'w1', 2, 10);
end $$;
create role rv_acme login;
grant sqljobs_worker to rv_acme;
select ok(jobs.tenant_bind('rv_acme', 'acme'), 'setup: rv_acme bound to acme');
set local jobs.fake_now = '';
set local session authorization rv_acme;
select is(jobs.recover('{q_rv_t}'), 1, 'bound to acme: only its lapsed job is recovered');
reset session authorization;
select results_eq($$ select key, state::text from jobs.job where queue = 'q_rv_t' order by key $$,
                  $$ values ('t_a', 'ready'), ('t_b', 'running') $$,
                  'globex''s lapsed job is left for a session that may see it');

select throws_ok($$ select jobs.recover('{}') $$, 'SJ005', null, 'no queue is refused');
select throws_ok($$ select jobs.recover('{q_rv}', 0) $$, 'SJ001', null, 'a limit outside 1..1000 is refused');

select * from finish();
rollback;
