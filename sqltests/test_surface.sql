begin;
select plan(2);
select has_schema('jobs');
select has_function('jobs', 'schema_version', '{}'::name[]);
select * from finish();
rollback;
