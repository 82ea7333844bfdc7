-- jobs.relay and jobs.purge_outbox refuse bad arguments with invalid_argument (SJ001).
begin;
select plan(8);

select throws_ok($$ select jobs.relay(-1, 'r', 30) $$, 'SJ001', null, 'a negative batch');
select throws_ok($$ select jobs.relay(10001, 'r', 30) $$, 'SJ001', null, 'a batch over 10,000');
select throws_ok($$ select jobs.relay(10, '', 30) $$, 'SJ001', null, 'an empty relay id');
select throws_ok($$ select jobs.relay(10, null, 30) $$, 'SJ001', null, 'a null relay id');
select throws_ok($$ select jobs.relay(10, 'r', 0) $$, 'SJ001', null, 'a lease of zero');
select throws_ok($$ select jobs.relay(10, 'r', 'Infinity') $$, 'SJ001', null, 'an endless lease');
select throws_ok($$ select jobs.purge_outbox(-1, 10) $$, 'SJ001', null, 'a negative retention');
select throws_ok($$ select jobs.purge_outbox(60, 0) $$, 'SJ001', null, 'max below 1');

select * from finish();
rollback;
