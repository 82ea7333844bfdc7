-- A job type's tenant policy (jobs.job_type.tenant_policy): "required" refuses an
-- enqueue naming no tenant, "forbidden" one naming a tenant, with tenant_policy (SJ022)
-- before any write, on every enqueue path; a tenant-bound session always satisfies
-- "required"; a worker's declaration sets a policy where none is stored, an operator's
-- put replaces it.
begin;
select plan(11);

set local jobs.notify = off;
do $$ begin
  perform jobs.job_type_put('tp.required', '{"tenant": "required"}');
  perform jobs.job_type_put('tp.forbidden', '{"tenant": "forbidden"}');
end $$;

select throws_ok($$ select jobs.enqueue('tp.required', 'a', '{}', '{}') $$,
                 'SJ022', null, 'required: an enqueue without a tenant is refused');
select throws_ok($$ select jobs.enqueue_many('[{"name": "tp.free", "key": "f1"},
                                              {"name": "tp.required", "key": "b"}]') $$,
                 'SJ022', 'sqljobs.tenant_policy: spec 2: job type tp.required requires a tenant and none was given',
                 'enqueue_many names the spec, and refuses the whole batch');
select throws_ok($$ select jobs.enqueue_batch('{"name": "tp.required"}', array['c1', 'c2'], null) $$,
                 'SJ022', null, 'enqueue_batch too');
select throws_ok($$ select jobs.enqueue('tp.forbidden', 'd', '{}', '{"tenant": "acme"}') $$,
                 'SJ022', null, 'forbidden: an enqueue naming a tenant is refused');
select is((select count(*)::int from jobs.job where name like 'tp.%'), 0, 'nothing was written');

select is((select outcome from jobs.enqueue('tp.required', 'e', '{}', '{"tenant": "acme"}')), 'created',
          'required, with a tenant: created');
select is((select outcome from jobs.enqueue('tp.forbidden', 'f', '{}', '{}')), 'created',
          'forbidden, without one: created');

-- a bound session always names its tenant
create role tp_acme login;
grant sqljobs_producer to tp_acme;
select ok(jobs.tenant_bind('tp_acme', 'acme'), 'setup: tp_acme bound to acme');
set local session authorization tp_acme;
select is((select outcome from jobs.enqueue('tp.required', 'g', '{}', '{}')), 'created',
          'a bound session satisfies required');
reset session authorization;

-- declare widens only; put replaces
do $$ begin perform jobs.job_type_declare('tp.required', '{"tenant": "forbidden"}'); end $$;
select is((select tenant_policy from jobs.job_type where name = 'tp.required'), 'required',
          'a worker''s declaration keeps a stored policy');
select throws_ok($$ select jobs.job_type_put('tp.x', '{"tenant": "sometimes"}') $$,
                 'SJ017', null, 'an unknown policy is refused');

select * from finish();
rollback;
