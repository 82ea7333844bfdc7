-- Trust boundary, the smaller holes (sql/98_roles.sql, sql/90_operator.sql,
-- sql/95_retention.sql): what every role and PUBLIC may execute; a null id in requeue is
-- a missing job (SJ006); '' names no queue in retention_put / retention_remove (SJ001;
-- null still means '*'); a worker stages one job as a run stages many (jobs.stage is
-- granted beside stage_many), a reader may not. Logged in as an operator, a worker, a
-- reader and as a login with no sqljobs role.
begin;
select plan(22);

create role tbg_op login in role sqljobs_operator;
create role tbg_nobody login;
create role tbg_worker login in role sqljobs_worker;
create role tbg_reader login in role sqljobs_reader;
grant usage on schema jobs to tbg_nobody;  -- (so that EXECUTE is the only gate tried)

-- ---------------------------------------------------------------- every role, and PUBLIC
select is_empty($$
  select r.role, f.fn
    from (values ('sqljobs_producer'), ('sqljobs_worker'), ('sqljobs_scheduler'), ('sqljobs_operator'),
                 ('sqljobs_reader')) r(role),
         (values ('jobs.spec_fields()'), ('jobs.backoff_s(integer,double precision,double precision,text)'),
                 ('jobs.retention_defaults()'), ('jobs.role_grants()'), ('jobs.redact(text,jsonb)'),
                 ('jobs.schema_floor()')) f(fn)
   where not pg_catalog.has_function_privilege(r.role, f.fn::regprocedure, 'execute') $$,
  'each of the five roles executes spec_fields, backoff_s, retention_defaults, role_grants, redact, schema_floor');
select set_eq($$ select p.oid::regprocedure::text from pg_catalog.pg_proc p
                  where p.pronamespace = 'jobs'::regnamespace
                    and pg_catalog.has_function_privilege('public', p.oid, 'execute') $$,
              $$ values ('jobs.redact_payload(jsonb,text[])'), ('jobs.bound_tenant()'),
                        ('jobs.redact_job_output(jsonb,jsonb,text[])') $$,
              'PUBLIC executes exactly redact_payload, bound_tenant and redact_job_output');
set local session authorization tbg_nobody;
select throws_ok($$ select jobs.enqueue('tbg.job', 'k') $$, '42501', null, 'a login with no sqljobs role cannot enqueue');
select throws_ok($$ select jobs.spec_fields() $$, '42501', null, 'nor read the spec fields');
select throws_ok($$ select jobs.channel_token('queue:q') $$, '42501', null, 'nor make a notification token');
select lives_ok($$ select jobs.redact_payload('{"a": 1}', array['a']) $$, 'it may call what jobs.job_view needs');
reset session authorization;

-- ---------------------------------------------------------------- requeue(array[null])
select lives_ok($$ select jobs.enqueue('tbg.job', 'f', '{}', '{"queue": "q_tbg", "max_attempts": 1}') $$,
                'setup: a job...');
select lives_ok($$ select jobs.nack(c.id, c.claim, null, 'fail') from jobs.claim(array['q_tbg'], 'w', 1, 30) c $$,
                '...that failed');
create temp table before as select test.tables_digest() as d;
set local session authorization tbg_op;
select throws_ok($$ select jobs.requeue(array[null]::bigint[]) $$, 'SJ006', null,
                 'operator: requeue(array[null]) is job_not_found');
select throws_ok(pg_catalog.format('select jobs.requeue(array[%s, null])', (select v.id from jobs.job_view v where v.key = 'f')),
                 'SJ006', null, 'operator: a null id beside a requeueable job refuses the call');

-- ---------------------------------------------------------------- retention: '' is no queue
select throws_ok($$ select * from jobs.retention_put('', '{"succeeded": 1}') $$, 'SJ001', null,
                 'operator: retention_put('''') is invalid_argument (not another way to write ''*'')');
select throws_ok($$ select jobs.retention_remove('') $$, 'SJ001', null, 'operator: retention_remove('''') too');
reset session authorization;
select is(test.tables_digest(), (select d from before), 'the refused calls changed nothing (the failed job, no retention row)');
select is((select state::text from jobs.job where key = 'f' and name = 'tbg.job'), 'failed', 'the job is still failed');
set local session authorization tbg_op;
select results_eq($$ select queue, succeeded_s from jobs.retention_put(null, '{"succeeded": 60}') $$,
                  $$ values ('*', 60::float8) $$, 'operator: retention_put(null) still writes the ''*'' row');
select throws_ok($$ select * from jobs.retention_put('', '{"succeeded": 1}') $$, 'SJ001', null,
                 'retention_put('''') refused beside a stored ''*'' row...');
select results_eq($$ select queue, succeeded_s from jobs.retention_policy() where queue = '*' $$,
                  $$ values ('*', 60::float8) $$, '...which it left unchanged');
select is(jobs.retention_remove(null), true, 'operator: retention_remove(null) removes the ''*'' row');
reset session authorization;

-- ---------------------------------------------------------------- stage: the worker's, not the reader's
set local session authorization tbg_worker;
select results_eq($$ select outcome from jobs.stage('tbg.staged', 'w1', '{}', '{"queue": "q_tbg_s"}') $$,
                  $$ values ('staged') $$, 'worker: jobs.stage stages one job (as stage_many does)');
set local session authorization tbg_reader;
select throws_ok($$ select * from jobs.stage('tbg.staged', 'r1', '{}', '{"queue": "q_tbg_s"}') $$, '42501', null,
                 'reader: jobs.stage is refused');
select throws_ok($$ select * from jobs.stage_many('[{"name": "tbg.staged", "key": "r2", "queue": "q_tbg_s"}]') $$,
                 '42501', null, 'reader: jobs.stage_many is refused too');
reset session authorization;
select results_eq($$ select key from jobs.outbox where name = 'tbg.staged' $$, $$ values ('w1') $$,
                  'the worker''s staged row is there, and no reader''s');

select * from finish();
rollback;
