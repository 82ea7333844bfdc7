-- jobs.claim: up to `limit` jobs in (priority, run_at, id) order across the given
-- queues; future run_at is skipped until it comes; other queues are not touched.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.jid: sqltests/_helpers.sql)

-- run_at relative to 2030-01-01 00:00:00
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "order.job", "key": "a1", "queue": "q_ord_a", "priority": 0,   "run_at": "2029-12-31T23:59:50Z"},
  {"name": "order.job", "key": "a2", "queue": "q_ord_a", "priority": -1,  "run_at": "2029-12-31T23:59:55Z"},
  {"name": "order.job", "key": "a3", "queue": "q_ord_a", "priority": 0,   "run_at": "2029-12-31T23:59:40Z"},
  {"name": "order.job", "key": "b1", "queue": "q_ord_b", "priority": 0,   "run_at": "2029-12-31T23:59:45Z"},
  {"name": "order.job", "key": "b2", "queue": "q_ord_b", "priority": 5},
  {"name": "order.job", "key": "a4", "queue": "q_ord_a", "priority": -10, "delay_s": 60},
  {"name": "order.job", "key": "c1", "queue": "q_ord_c", "priority": -99}
]') $$, 'setup: jobs across three queues, one in the future');

-- claim answers in (priority, run_at, id) order; row_number() keeps the answer order
create temp table first3 as
  select pg_catalog.row_number() over () as pos, c.id
    from jobs.claim('{q_ord_a,q_ord_b}', 'w', 3, 3600) c;
select results_eq($$ select id from first3 order by pos $$,
                  $$ values (test.jid('order.job', 'a2')), (test.jid('order.job', 'a3')), (test.jid('order.job', 'b1')) $$,
                  'limit 3: the best three across both queues, in (priority, run_at) order');

create temp table next10 as
  select pg_catalog.row_number() over () as pos, c.id
    from jobs.claim('{q_ord_a,q_ord_b}', 'w', 10, 3600) c;
select results_eq($$ select id from next10 order by pos $$,
                  $$ values (test.jid('order.job', 'a1')), (test.jid('order.job', 'b2')) $$,
                  'the next claim answers the rest, fewer than its limit');
-- (ids read first, in a scalar subquery: distributed on Citus, a function per row of a
-- query over the jobs would run on a shard)
select is((select state from jobs.job where id = (select test.jid('order.job', 'a4'))),
          'ready'::jobs.job_state,
          'a job whose run_at is in the future is skipped, whatever its priority');
select is((select count(*)::int from jobs.claim('{q_ord_a,q_ord_b}', 'w', 10, 3600)), 0,
          'nothing else is claimable now');
select is((select state from jobs.job where id = (select test.jid('order.job', 'c1'))),
          'ready'::jobs.job_state,
          'a queue not named is never claimed from');

set local jobs.fake_now = '2030-01-01 00:00:59.999+00';
select is((select count(*)::int from jobs.claim('{q_ord_a}', 'w', 10, 3600)), 0,
          'not a moment before its run_at');
set local jobs.fake_now = '2030-01-01 00:01:00+00';
select results_eq($$ select id from jobs.claim('{q_ord_a}', 'w', 10, 3600) $$,
                  $$ values (test.jid('order.job', 'a4')) $$,
                  'once jobs.now() reaches its run_at, the job is claimed');

-- ties on (priority, run_at) go by id
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "order.job", "key": "t1", "queue": "q_ord_t"},
  {"name": "order.job", "key": "t2", "queue": "q_ord_t"},
  {"name": "order.job", "key": "t3", "queue": "q_ord_t"}
]') $$, 'setup: three jobs with the same priority and run_at');
select ok(test.jid('order.job', 't1') < test.jid('order.job', 't2') and test.jid('order.job', 't2') < test.jid('order.job', 't3'),
          'setup: their ids ascend in input order');
select results_eq($$ select id from jobs.claim('{q_ord_t}', 'w', 2, 3600) $$,
                  $$ values (test.jid('order.job', 't1')), (test.jid('order.job', 't2')) $$,
                  'ties are claimed by id');
select results_eq($$ select id from jobs.claim('{q_ord_t}', 'w', 2, 3600) $$,
                  $$ values (test.jid('order.job', 't3')) $$, 'then the last');

select * from finish();
rollback;
