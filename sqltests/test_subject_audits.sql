-- jobs.subject_audits (sql/87_integrations.sql): the erase records newest first, a limit
-- of 1..1000, readable by sqljobs_reader, refused to a tenant-bound session.
begin;
select plan(6);

insert into jobs.subject_audit (action, subject_hash, actor, session_role, at, erased)
values ('erase', 'aa', 'dpo', 'postgres', now(), '{"rows": {"jobs.job.payload": 1}}'),
       ('erase', 'bb', null, 'postgres', now(), '{}');

select results_eq($$ select subject_hash, actor from jobs.subject_audits() $$,
                  $$ values ('bb'::text, null::text), ('aa', 'dpo') $$, 'newest first');
select results_eq($$ select subject_hash from jobs.subject_audits(1) $$,
                  $$ values ('bb'::text) $$, 'the limit holds');
select throws_ok($$ select * from jobs.subject_audits(0) $$, 'SJ001', null, 'a limit of 0: invalid_argument');

create role audit_reader login;
grant sqljobs_reader to audit_reader;
create role audit_worker login;
grant sqljobs_worker to audit_worker;
create role audit_bound login;
grant sqljobs_reader to audit_bound;
do $$ begin perform jobs.tenant_bind('audit_bound', 'acme'); end $$;

set local session authorization audit_reader;
select is((select count(*) from jobs.subject_audits())::int, 2, 'a reader reads the audit');
reset session authorization;
set local session authorization audit_worker;
select throws_ok($$ select * from jobs.subject_audits() $$, '42501', null, 'a worker does not');
reset session authorization;
set local session authorization audit_bound;
select throws_ok($$ select * from jobs.subject_audits() $$, 'SJ018', null,
                 'a tenant-bound session is refused the fleet''s audit');
reset session authorization;

select * from finish();
rollback;
