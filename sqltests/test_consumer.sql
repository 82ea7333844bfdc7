-- Stream consumers' cursors (sql/87_integrations.sql): consumer_cursor creates and locks
-- the row; consumer_advance moves it fenced on the turn read; consumers() lists; roles:
-- a worker moves cursors, a reader reads; a tenant-bound session is refused (a consumer
-- is the fleet's).
begin;
select plan(11);

select results_eq($$ select cursor, turn from jobs.consumer_cursor('orders') $$,
                  $$ values (null::jsonb, 0::bigint) $$, 'a new consumer starts at null, turn 0');
select is(jobs.consumer_advance('orders', 0, '{"id": 10}', 10), true, 'advance from turn 0');
select is(jobs.consumer_advance('orders', 0, '{"id": 20}', 10), false,
          'advance from a stale turn: false, nothing moved');
select results_eq($$ select cursor, turn, rows_done from jobs.consumers() $$,
                  $$ values ('{"id": 10}'::jsonb, 1::bigint, 10::bigint) $$, 'consumers() shows it');
select throws_ok($$ select jobs.consumer_advance('orders', 1, null, -1) $$, 'SJ001', null,
                 'negative rows: invalid_argument');
select throws_ok($$ select * from jobs.consumer_cursor('') $$, 'SJ001', null, 'an empty name');
select is((select locktype from pg_locks l where l.relation = 'jobs.consumer'::regclass
            and l.mode = 'RowShareLock' and l.pid = pg_backend_pid()), 'relation',
          'consumer_cursor took the row lock (FOR UPDATE) in this transaction');

create role consumer_worker login;
grant sqljobs_worker to consumer_worker;
create role consumer_reader login;
grant sqljobs_reader to consumer_reader;
create role consumer_bound login;
grant sqljobs_worker to consumer_bound;
do $$ begin perform jobs.tenant_bind('consumer_bound', 'acme'); end $$;

set local session authorization consumer_worker;
select is(jobs.consumer_advance('orders', 1, '{"id": 20}', 5), true, 'a worker advances');
reset session authorization;
set local session authorization consumer_reader;
select throws_ok($$ select jobs.consumer_advance('orders', 2, null, 0) $$, '42501', null,
                 'a reader may not advance');
select is((select turn from jobs.consumers()), 2::bigint, 'a reader reads');
reset session authorization;
set local session authorization consumer_bound;
select throws_ok($$ select * from jobs.consumer_cursor('orders') $$, 'SJ018', null,
                 'a tenant-bound session may not run a consumer');
reset session authorization;

select * from finish();
rollback;
