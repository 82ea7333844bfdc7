-- jobs.limit_put / limit_remove / limits: a limit is defined, replaced and removed;
-- every bad definition is refused with invalid_argument (SJ001) and writes nothing; a
-- removal of no limit is limit_not_found (SJ013).
begin;
select plan(28);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select is(jobs.limit_put('all', '{"scope": "global", "concurrency": 3}'), true, 'a new limit: true');
select is(jobs.limit_put('all', '{"scope": "global", "concurrency": 4}'), false, 'replaced: false');
select is(jobs.limit_put('mail', '{"scope": "queue", "target": "mail", "rate": {"n": 10, "per_s": 1}}'),
          true, 'a queue rate limit');
select is(jobs.limit_put('per-customer', '{"scope": "key", "target": "sync", "key": ["customer", "id"],
                                          "concurrency": 2, "when_busy": "fail"}'),
          true, 'a key limit on a nested field, failing when busy');
select is(jobs.limit_put('tenants', '{"scope": "tenant", "concurrency": 5}'), true,
          'a tenant limit without a target: each tenant on its own');
select results_eq(
  $$ select name, scope, target, key_path, concurrency, rate_n, rate_per_s, when_busy, origin
       from jobs.limits() $$,
  $$ values ('all', 'global', null, null::text[], 4, null::int, null::float8, 'wait', 'api'),
            ('mail', 'queue', 'mail', null, null, 10, 1, 'wait', 'api'),
            ('per-customer', 'key', 'sync', array['customer', 'id'], 2, null, null, 'fail', 'api'),
            ('tenants', 'tenant', null, null, 5, null, null, 'wait', 'api') $$,
  'jobs.limits() lists them as defined');
select is(jobs.limit_put('declared', '{"scope": "name", "target": "x", "concurrency": 1, "origin": "declared"}'),
          true, 'origin declared (a worker writes what the code declares)');

-- refusals
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "concurrency": 0}') $$,
  'SJ001', 'sqljobs.invalid_argument: concurrency must be a whole number from 1 to 1000000',
  'concurrency 0');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "concurrency": -2}') $$,
  'SJ001', null, 'a negative concurrency');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "concurrency": 1.5}') $$,
  'SJ001', null, 'a fractional concurrency');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "planet", "concurrency": 1}') $$,
  'SJ001', 'sqljobs.invalid_argument: scope must be global, queue, name, tenant or key',
  'an unknown scope');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "rate": {"n": 5, "per_s": 0}}') $$,
  'SJ001', 'sqljobs.invalid_argument: rate must be {"n": starts (1 to 100000), "per_s": seconds (more than 0, at most a year)}',
  'an interval of zero');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "rate": {"n": 0, "per_s": 1}}') $$,
  'SJ001', null, 'a rate of zero starts');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global"}') $$,
  'SJ001', 'sqljobs.invalid_argument: a limit needs concurrency, rate, or both', 'no amount');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "queue", "concurrency": 1}') $$,
  'SJ001', 'sqljobs.invalid_argument: a queue limit needs a target (the queue)', 'a queue limit without its queue');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "target": "x", "concurrency": 1}') $$,
  'SJ001', 'sqljobs.invalid_argument: a global limit takes no target', 'a global limit with a target');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "key", "target": "sync", "concurrency": 1}') $$,
  'SJ001', null, 'a key limit without its key');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "key", "target": "sync", "key": [], "concurrency": 1}') $$,
  'SJ001', 'sqljobs.invalid_argument: key must be a payload field name, or a path as a list of names',
  'an empty key path');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "concurrency": 1, "key": "x"}') $$,
  'SJ001', null, 'a key on a limit that is not a key limit');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "concurrency": 1, "when_busy": "fail"}') $$,
  'SJ001', 'sqljobs.invalid_argument: when_busy fail is for a key limit with concurrency',
  'when_busy fail off a key limit');
select throws_ok($$ select jobs.limit_put('bad', '{"scope": "global", "concurrency": 1, "colour": "red"}') $$,
  'SJ001', 'sqljobs.invalid_argument: unknown field ''colour'' (a limit takes scope, target, key, concurrency, rate, when_busy, origin)',
  'an unknown field');
select throws_ok($$ select jobs.limit_put('sqljobs.mine', '{"scope": "global", "concurrency": 1}') $$,
  'SJ001', 'sqljobs.invalid_argument: limit names starting with sqljobs. are the engine''s own',
  'the engine''s names');
select throws_ok($$ select jobs.limit_put('a|b', '{"scope": "global", "concurrency": 1}') $$,
  'SJ001', 'sqljobs.invalid_argument: a limit name is 1 to 200 characters, without |', 'a | in the name');
select throws_ok($$ select jobs.limit_put('bad', '[1]') $$,
  'SJ001', 'sqljobs.invalid_argument: a limit is a JSON object', 'not an object');
select is((select count(*)::int from jobs.limit where name = 'bad'), 0, 'no refusal wrote anything');

-- removal
select lives_ok($$ select jobs.limit_remove('mail') $$, 'a limit is removed');
select throws_ok($$ select jobs.limit_remove('mail') $$, 'SJ013',
  'sqljobs.limit_not_found: no limit named ''mail''', 'a second removal: limit_not_found');
select is((select count(*)::int from jobs.limits()), 4, 'the others stay');

select * from finish();
rollback;
