-- jobs.define_spec (sql/20_enqueue.sql) counts jobs.job.attempts, the attempt history,
-- among the engine's own columns: it is not a job spec field, so no caller sets it.
begin;
select plan(3);

select ok(not (jobs.spec_fields() ? 'attempts'), 'attempts is not a spec field');
select ok(not (jobs.spec_defaults() ? 'attempts'), 'nor has it a spec default');
select throws_ok($$ select jobs.enqueue('spec.job', 'k', '{}', '{"attempts": [{"attempt": 1}]}') $$,
                 'SJ001', null, 'an enqueue that sets it is refused (invalid_argument)');

select * from finish();
rollback;
