-- The outbound webhooks' shared state (sql/87_integrations.sql): webhook_attempt_put
-- records a running webhook job's attempt fenced on its claim (SJ004 otherwise), cut
-- to 512 characters, one row per attempt; webhook_disable / webhook_enable /
-- webhook_disabled / webhook_endpoints; webhook_attempts reads one job's rows; the
-- roles: a worker records but may not disable, a reader reads only; a session bound
-- to a tenant is refused another tenant's endpoint and job (SJ018).
begin;
select plan(25);

set local jobs.notify = off;
create temp table c as select test.start('hook.a', 'e1', '{"queue": "q_hook", "tenant": "acme"}') as claim;
alter table c add column id bigint;
update c set id = test.jid('hook.a', 'e1');
grant select on c to public;

-- webhook_attempt_put ---------------------------------------------------------------
select throws_ok(format('select jobs.webhook_attempt_put(%s, %s, %L, %L, 200, 5, null)',
                        test.jid('hook.a', 'e1'), (select claim from c) + 1, 'hook.a', 'delivered'),
                 'SJ004', null, 'another claim: lease_lost');
select throws_ok(format('select jobs.webhook_attempt_put(%s, %s, %L, %L, 200, 5, null)',
                        test.jid('hook.a', 'e1'), (select claim from c), 'hook.other', 'delivered'),
                 'SJ004', null, 'another endpoint name than the job''s: lease_lost');
select throws_ok(format('select jobs.webhook_attempt_put(%s, %s, %L, %L, 200, 5, null)',
                        test.jid('hook.a', 'e1'), (select claim from c), 'hook.a', 'sent'),
                 'SJ001', null, 'an unknown outcome: invalid_argument');
select throws_ok(format('select jobs.webhook_attempt_put(%s, %s, %L, %L, 99, 5, null)',
                        test.jid('hook.a', 'e1'), (select claim from c), 'hook.a', 'retry'),
                 'SJ001', null, 'a status outside 100..599: invalid_argument');
select throws_ok(format('select jobs.webhook_attempt_put(%s, %s, %L, %L, 500, -1, null)',
                        test.jid('hook.a', 'e1'), (select claim from c), 'hook.a', 'retry'),
                 'SJ001', null, 'a negative latency: invalid_argument');
select is((select count(*) from jobs.webhook_attempt)::int, 0, 'the refusals wrote nothing');

select is(jobs.webhook_attempt_put(test.jid('hook.a', 'e1'), (select claim from c), 'hook.a',
                                   'retry', 503, 12, repeat('x', 600)),
          1, 'the first attempt is recorded under the job''s attempt number');
select is((select length(excerpt) from jobs.webhook_attempt), 512, 'the excerpt is cut to 512 characters');
select is(jobs.webhook_attempt_put(test.jid('hook.a', 'e1'), (select claim from c), 'hook.a',
                                   'error', null, 30, 'timed out'),
          1, 'the same attempt again replaces its row');
select results_eq(format('select attempt, outcome, status, latency_ms, excerpt from jobs.webhook_attempts(%s)',
                         test.jid('hook.a', 'e1')),
                  $$ values (1, 'error'::text, null::integer, 30, 'timed out'::text) $$,
                  'webhook_attempts: one row per attempt');

-- disable / enable --------------------------------------------------------------------
select is(jobs.webhook_disabled('hook.a'), null, 'no row: enabled');
select throws_ok($$ select jobs.webhook_disable('hook.a', null, ' ') $$, 'SJ001', null,
                 'a disable needs a reason');
select throws_ok($$ select jobs.webhook_disable('', null, 'x') $$, 'SJ001', null,
                 'a disable needs a name');
select lives_ok($$ select jobs.webhook_disable('hook.a', 'acme', 'gone 410') $$, 'disable');
select is(jobs.webhook_disabled('hook.a'), 'gone 410', 'webhook_disabled answers the reason');
select results_eq($$ select name, tenant, reason from jobs.webhook_endpoints() $$,
                  $$ values ('hook.a'::text, 'acme'::text, 'gone 410'::text) $$, 'webhook_endpoints lists it');

-- roles and tenants -------------------------------------------------------------------
create role hook_worker login;
grant sqljobs_worker to hook_worker;
create role hook_reader login;
grant sqljobs_reader to hook_reader;
create role hook_globex login;
grant sqljobs_operator to hook_globex;
do $$ begin perform jobs.tenant_bind('hook_globex', 'globex'); end $$;

set local session authorization hook_worker;
select is(jobs.webhook_attempt_put((select id from c),
                                   (select claim from c), 'hook.a', 'disabled', null, 0, null),
          1, 'a worker records its attempt');
select throws_ok($$ select jobs.webhook_enable('hook.a') $$, '42501', null,
                 'a worker may not enable an endpoint');
reset session authorization;

set local session authorization hook_reader;
select throws_ok($$ select jobs.webhook_disable('hook.a', null, 'x') $$, '42501', null,
                 'a reader may not disable an endpoint');
select is((select count(*) from jobs.webhook_attempts((select id from c)))::int, 1, 'a reader reads attempts');
reset session authorization;

set local session authorization hook_globex;
select throws_ok($$ select jobs.webhook_enable('hook.a') $$, 'SJ018', null,
                 'an operator bound to globex may not enable acme''s endpoint');
select throws_ok($$ select jobs.webhook_disable('hook.a', 'globex', 'mine now') $$, 'SJ018', null,
                 'nor take it over by disabling it as its own');
select is(jobs.webhook_disabled('hook.a'), null, 'nor does it see acme''s endpoint');
select throws_ok($$ select * from jobs.webhook_attempts((select id from c)) $$, 'SJ018', null,
                 'nor read the attempts of acme''s job');
reset session authorization;

select is(jobs.webhook_enable('hook.a'), true, 'enable answers true when it was disabled');

select * from finish();
rollback;
