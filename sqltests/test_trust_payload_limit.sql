-- Trust boundary: the payload limit (sql/10_errors.sql, jobs.max_payload_bytes()). It is
-- 1 MiB, or what an administrator configured with `alter role/database ... set
-- jobs.max_payload_bytes`; a session setting is the caller's input: it may LOWER the
-- limit, never raise it past what its role and database allow. Logged in as a producer.
begin;
select plan(15);

create role tbp_producer login in role sqljobs_producer;
set local jobs.notify = off;
create temp table before as select test.tables_digest() as d;

-- ---------------------------------------------------------------- no administrator setting: 1 MiB
set local session authorization tbp_producer;
set local jobs.max_payload_bytes = 10000000;
select is(jobs.max_payload_bytes(), 1048576, 'a producer setting 10,000,000 still gets 1 MiB');
select throws_ok($$ select * from jobs.enqueue('tbp.job', 'big', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 2097152))) $$,
                 'SJ002', null, 'so its 2 MB payload is refused (payload_too_large)');
select throws_ok($$ select * from jobs.stage('tbp.job', 'big', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 2097152))) $$,
                 'SJ002', null, 'staged too');
set local jobs.max_payload_bytes = 100;
select is(jobs.max_payload_bytes(), 100, 'lowering it to 100 is honoured');
select throws_ok($$ select * from jobs.enqueue('tbp.job', 'mid', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 191))) $$,
                 'SJ002', null, 'a 200-byte payload is then refused');
reset session authorization;
select is(test.tables_digest(), (select d from before), 'the refused calls wrote nothing');

-- ---------------------------------------------------------------- the administrator lowers it for the role
alter role tbp_producer set jobs.max_payload_bytes = 500;
set local session authorization tbp_producer;
set local jobs.max_payload_bytes = 10000000;
select is(jobs.max_payload_bytes(), 500, 'under alter role ... set 500, a session setting 10,000,000 gets 500');
select throws_ok($$ select * from jobs.enqueue('tbp.job', 'r600', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 591))) $$,
                 'SJ002', null, 'a 600-byte payload is refused, the session''s setting notwithstanding');
select throws_ok($$ select * from jobs.enqueue_many(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                     'name', 'tbp.job', 'key', 'm600', 'payload', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 591))))) $$,
                 'SJ002', null, 'through enqueue_many too');
select throws_ok($$ select jobs.emit_event('tbp.event', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 591))) $$,
                 'SJ002', null, 'and an event payload');
set local jobs.max_payload_bytes = 200;
select is(jobs.max_payload_bytes(), 200, 'the session may still lower it below the role''s 500');
-- nor may it raise its own role's default: PostgreSQL lets an ordinary role ALTER its own
-- defaults, but not of a setting no extension defines (only a superuser, or a role
-- granted SET on the parameter, may)
select throws_ok($$ alter role tbp_producer set jobs.max_payload_bytes = 10000000 $$, '42501', null,
                 'the producer cannot raise its own role''s limit with alter role');
-- an empty setting is no lower limit: the role's still holds
set local jobs.max_payload_bytes = '';
select is(jobs.max_payload_bytes(), 500, 'an empty session setting does not lift the role''s 500 either');
reset session authorization;
select is(test.tables_digest(), (select d from before), 'no refused call wrote anything');
set local session authorization tbp_producer;
set local jobs.max_payload_bytes = 10000000;
select lives_ok($$ select * from jobs.enqueue('tbp.job', 'r400', pg_catalog.jsonb_build_object('s', pg_catalog.repeat('x', 391))) $$,
                'a 400-byte payload is taken under the role''s 500');
reset session authorization;

select * from finish();
rollback;
