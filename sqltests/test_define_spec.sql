-- jobs.define_spec: the job spec is read off jobs.job. A column added to the table is a
-- spec field at once, with its default, its JSON type rule and a place in the one insert
-- (this is the whole change a new field needs in SQL); the engine's own columns are not
-- fields; a column type without a JSON rule is refused.
begin;
select plan(11);

select is((select pg_catalog.array_agg(k order by k) from pg_catalog.jsonb_object_keys(jobs.spec_fields()) k),
          array['actor', 'dead_letter', 'debounce_s', 'delay_s', 'group_key', 'hooks', 'key', 'max_attempts', 'name',
                'on_conflict', 'payload', 'priority', 'queue', 'retry_base_s', 'retry_cap_s',
                'retry_jitter', 'run_at', 'singleton', 'tenant', 'throttle_n', 'throttle_per_s',
                'timeout_s', 'traceparent'],
          'the fields: the settable columns of jobs.job, and delay_s and on_conflict');
select is(jobs.spec_defaults(),
          '{"queue": "default", "payload": {}, "priority": 0, "dead_letter": true, "retry_cap_s": 3600,
            "max_attempts": 25, "retry_base_s": 1, "retry_jitter": "full", "singleton": false}'::jsonb,
          'the defaults are the columns'' DEFAULTs');
select throws_ok($$ select * from jobs.enqueue('ds.job', 'k', '{}', '{"state": "succeeded"}') $$,
                 'SJ001', 'sqljobs.invalid_argument: spec 1: unknown field ''state''',
                 'an engine column is not a field');

-- a new field: one column, then define_spec
alter table jobs.job add column colour text not null default 'blue';
select lives_ok($$ select jobs.define_spec() $$, 'define_spec reads the new column');
select is((select a.attname::text from pg_catalog.pg_attribute a
            where a.attrelid = 'jobs.job_spec'::pg_catalog.regclass and a.attnum > 0
            order by a.attnum desc limit 1), 'colour',
          'the spec record adds it last, as a fresh install of that table would');
select is(jobs.spec_fields()->>'colour', 'text', 'it is a field');
select is(jobs.spec_defaults()->>'colour', 'blue', 'with its default');
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "ds.job", "key": "a", "colour": "red"}, {"name": "ds.job", "key": "b"}]') $$,
                'a batch sets it');
select results_eq($$ select key, colour from jobs.job where name = 'ds.job' order by key $$,
                  $$ values ('a', 'red'), ('b', 'blue') $$, 'stored, or defaulted');
select throws_ok($$ select * from jobs.enqueue('ds.job', 'c', '{}', '{"colour": 7}') $$,
                 'SJ001', 'sqljobs.invalid_argument: spec 1: ''colour'' must be a string',
                 'and checked by its type');

alter table jobs.job add column shape point;
select throws_like($$ select jobs.define_spec() $$, '%no JSON rule for column type point%',
                   'a column type without a JSON rule is refused when the spec is defined');

select * from finish();
rollback;
