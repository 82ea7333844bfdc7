-- Redaction (sql/92_introspection.sql): the job-type registry, jobs.redact, the paths,
-- and every view of a job (job_view, list_jobs, job_detail) hiding a sensitive value
-- for a job enqueued from plain SQL, with no Python model anywhere.
begin;
select plan(36);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

-- The registry: put, replace, refuse.
select is(jobs.job_type_put('pay.charge', '{"queue": "pay", "sensitive": ["password", "card.number", "items[].ssn", "tokens[]"], "personal": ["card.holder", "items[].email"]}'),
          true, 'job_type_put registers a new type');
select is(jobs.job_type_put('pay.charge', '{"queue": "pay", "sensitive": ["password", "card.number", "items[].ssn", "tokens[]", "card.number"], "personal": ["card.holder", "items[].email"]}'),
          false, 'job_type_put of an existing type replaces it (false: not new)');
select is((select sensitive_paths from jobs.job_types() where name = 'pay.charge'),
          array['card.number', 'items[].ssn', 'password', 'tokens[]'], 'paths are stored sorted and once');
select is((select origin from jobs.job_types() where name = 'pay.charge'), 'api', 'a type put from SQL is origin api');
select throws_ok($$ select jobs.job_type_put('x', '{"sensitive": ["a..b"]}') $$, 'SJ017', null, 'a malformed path is refused (SJ017)');
select throws_ok($$ select jobs.job_type_put('x', '{"secret": ["a"]}') $$, 'SJ017', null, 'an unknown field is refused (SJ017)');
select throws_ok($$ select jobs.job_type_put('x', '{"sensitive": "a"}') $$, 'SJ017', null, 'paths must be an array (SJ017)');
select throws_ok($$ select jobs.job_type_put('x', '{"timeout_s": -1}') $$, 'SJ017', null, 'a negative timeout is refused (SJ017)');
select is((select pg_catalog.count(*) from jobs.job_type where name = 'x'), 0::bigint, 'nothing is written for a refused type');
-- The data factory that declared a type (version 3): stored as given, follows the code.
select is(jobs.job_type_declare('sales.daily', '{"factory": {"kind": "rollup", "target": "public.daily_sales", "cron": null}}'),
          true, 'a factory''s job type is declared with its factory');
select is((select factory from jobs.job_types() where name = 'sales.daily'),
          '{"kind": "rollup", "target": "public.daily_sales", "cron": null}'::jsonb, 'job_types() answers the factory as given');
select is((select factory from jobs.job_types() where name = 'pay.charge'), null, 'an ordinary job type has none');
select throws_ok($$ select jobs.job_type_put('x', '{"factory": {"target": "t"}}') $$, 'SJ017', null, 'a factory without a kind is refused (SJ017)');
select is(jobs.job_type_declare('sales.daily', '{}'), false, 'declared again, no longer by a factory');
select is((select factory from jobs.job_types() where name = 'sales.daily'), null, 'the factory follows the code');
select throws_ok($$ select jobs.job_type_remove('nope') $$, 'SJ016', null, 'removing an unknown type raises SJ016');

-- Paths.
select is(jobs.redaction_path_steps('items[].ssn'), array['items', '[]', 'ssn'], 'a path splits into steps');
select is(jobs.redact_payload('{"a": {"b": [{"c": 1, "d": 2}]}, "m": {"x": "1", "y": "2"}, "n": null}',
                              array['a.b[].c', 'm.*', 'n', 'absent.z']),
          '{"a": {"b": [{"c": "[redacted]", "d": 2}]}, "m": {"x": "[redacted]", "y": "[redacted]"}, "n": null}'::jsonb,
          'nested, array and wildcard paths are redacted; nulls and absent paths stay');
select is(jobs.redact('pay.charge', '{"password": "hunter22", "card": {"number": "4111111111111111", "holder": "Ann"}, "amount": 5}'),
          '{"password": "[redacted]", "card": {"number": "[redacted]", "holder": "Ann"}, "amount": 5}'::jsonb,
          'jobs.redact hides the sensitive paths and shows personal data');
select is(jobs.redact('never.registered', '{"password": "hunter22"}'), '"[redacted]"'::jsonb,
          'a name with no job type shows no payload (fail closed)');
select is(jobs.redact('never.registered', '{}'), '{}'::jsonb, 'an empty payload is shown as it is');
select is(jobs.redact_strings('{"message": "card 4111111111111111 declined", "n": 4111111111111111}',
                              array['4111111111111111']),
          '{"message": "card [redacted] declined", "n": "[redacted]"}'::jsonb, 'values are replaced inside strings and numbers');
select is(jobs.redaction_secrets('{"password": "ab", "card": {"number": "12345"}}', array['password', 'card']),
          array['12345'], 'values shorter than 3 characters are not searched for in text');

-- A job enqueued from plain SQL, failed with an error quoting its card number.
create temp table e as
  select * from jobs.enqueue('pay.charge', 'k1',
    '{"password": "hunter22", "card": {"number": "4111111111111111", "holder": "Ann"}, "items": [{"ssn": "078-05-1120", "email": "a@example.com"}], "tokens": ["tok_live_abc"]}',
    '{"queue": "pay", "tenant": "acme"}');
do $$ begin
  perform jobs.nack(c.id, c.claim, '{"kind": "error", "message": "card 4111111111111111 declined for hunter22", "traceback": "ValueError: 078-05-1120"}')
     from jobs.claim('{pay}', 'w', 1, 30) c;
end $$;

select is((select pg_catalog.to_jsonb(v)::text ~ '4111111111111111|hunter22|078-05-1120|tok_live_abc'
             from jobs.job_view v where v.id = (select id from e)), false,
          'no column of job_view carries a sensitive value');
select is((select v.payload from jobs.job_view v where v.id = (select id from e)),
          '{"password": "[redacted]", "card": {"number": "[redacted]", "holder": "Ann"}, "items": [{"ssn": "[redacted]", "email": "a@example.com"}], "tokens": ["[redacted]"]}'::jsonb,
          'job_view shows the payload redacted');
select is((select v.last_error->>'message' from jobs.job_view v where v.id = (select id from e)),
          'card [redacted] declined for [redacted]', 'job_view redacts the values inside last_error');
select is(jobs.job_payload((select id from e))->'card'->>'number', '4111111111111111',
          'jobs.job_payload still reads the real value (the privileged read)');
select is((select pg_catalog.count(*) from jobs.list_jobs('{"tenant": "acme"}') l
            where pg_catalog.to_jsonb(l)::text ~ '4111111111111111|hunter22'), 0::bigint,
          'list_jobs rows carry no sensitive value');
select is(jobs.job_detail((select id from e))::text ~ '4111111111111111|hunter22|078-05-1120', false,
          'job_detail carries no sensitive value');
select is(jobs.job_detail((select id from e))->'job'->>'state', 'ready', 'job_detail shows the job row');
select is(jobs.job_detail(-1), null, 'job_detail of a missing job is null');

-- Personal data.
select results_eq($$ select name, personal_paths, jobs from jobs.personal_data() $$,
                  $$ values ('pay.charge', array['card.holder', 'items[].email'], 1::bigint) $$,
                  'personal_data lists the types holding personal data, with stored jobs');

-- A type registered later redacts the jobs already stored.
create temp table e2 as select * from jobs.enqueue('late.type', 'k', '{"secret": "s3cr3t-value", "n": 1}');
select is((select v.payload from jobs.job_view v where v.id = (select id from e2)), '"[redacted]"'::jsonb,
          'before its type is registered the payload is hidden whole');
select lives_ok($$ select jobs.job_type_put('late.type', '{"sensitive": ["secret"]}') $$, 'register it');
select is((select v.payload from jobs.job_view v where v.id = (select id from e2)),
          '{"secret": "[redacted]", "n": 1}'::jsonb, 'after, only its sensitive path is hidden');
select lives_ok($$ select jobs.job_type_remove('late.type') $$, 'job_type_remove removes a type');

select * from finish();
rollback;
