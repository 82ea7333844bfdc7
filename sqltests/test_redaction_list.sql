-- jobs.list_jobs (filters, keyset pagination, refusals) and the path rules' edges:
-- strict paths (a key on an array, [] on an object reach nothing) and quoted keys.
begin;
select plan(16);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table a as select * from jobs.enqueue('list.a', 'a1', '{}', '{"queue": "q_list", "tenant": "t1"}');
set local jobs.fake_now = '2030-01-02 00:00:00+00';
create temp table b as select * from jobs.enqueue('list.b', 'b1', '{}', '{"queue": "q_list", "tenant": "t2"}');
create temp table c as select * from jobs.enqueue('list.b', 'b2', '{}', '{"queue": "q_list", "tenant": "t2"}');

select results_eq($$ select id from jobs.list_jobs('{"queue": "q_list"}') $$,
                  $$ values ((select id from c)), ((select id from b)), ((select id from a)) $$,
                  'newest first');
select results_eq($$ select id from jobs.list_jobs('{"queue": "q_list"}', (select id from b), 10) $$,
                  $$ values ((select id from a)) $$, 'after_id is a keyset cursor: only older ids');
select results_eq($$ select id from jobs.list_jobs('{"queue": "q_list"}', null, 2) $$,
                  $$ values ((select id from c)), ((select id from b)) $$, 'limit bounds the page');
select results_eq($$ select id from jobs.list_jobs('{"name": ["list.a"], "tenant": "t1"}') $$,
                  $$ values ((select id from a)) $$, 'name and tenant filters, as a string or an array');
select results_eq($$ select id from jobs.list_jobs('{"key": "b2"}') $$,
                  $$ values ((select id from c)) $$, 'the key filter');
select results_eq($$ select id from jobs.list_jobs('{"queue": "q_list", "created_before": "2030-01-01T12:00:00Z"}') $$,
                  $$ values ((select id from a)) $$, 'created_before is exclusive of later jobs');
select is((select pg_catalog.count(*) from jobs.list_jobs('{"queue": "q_list", "created_after": "2030-01-02T00:00:00Z"}')),
          2::bigint, 'created_after is inclusive');
select is((select pg_catalog.count(*) from jobs.list_jobs('{"queue": "q_list", "finished_after": "2000-01-01T00:00:00Z"}')),
          0::bigint, 'no job finished: finished_after matches none');
select throws_ok($$ select * from jobs.list_jobs('{"colour": "red"}') $$, 'SJ001', null, 'an unknown filter field is refused');
select throws_ok($$ select * from jobs.list_jobs('{"state": "nope"}') $$, 'SJ001', null, 'an unknown state is refused');
select throws_ok($$ select * from jobs.list_jobs('{"created_after": "yesterday-ish"}') $$, 'SJ001', null, 'a bad time is refused');
select throws_ok($$ select * from jobs.list_jobs('{}', null, 0) $$, 'SJ001', null, 'a page of 0 is refused');

-- Paths are strict: they reach only what they name.
select is(jobs.redaction_secrets('{"items": [{"ssn": "111-22"}], "card": {"number": "4111"}}',
                                 array['items.ssn', 'card[]']),
          '{}'::text[], 'a key on an array, or [] on an object, reaches nothing');
select is(jobs.redact_payload('{"items": {"ssn": "x"}}', array['items[].ssn']), '{"items": {"ssn": "x"}}'::jsonb,
          'redact_payload follows the same rule');
select is(jobs.redaction_secrets('{"we\"ird": "quoted-val", "b\\s": "slashed-val"}', array['we"ird', 'b\s']),
          array['slashed-val', 'quoted-val'], 'keys with quotes and backslashes are quoted in the jsonpath');
select is(jobs.redaction_secrets('{"deep": {"a": [1234, "xyz", true, null]}}', array['deep']),
          array['1234', 'true', 'xyz'], 'a path to an object covers every scalar under it');

select * from finish();
rollback;
