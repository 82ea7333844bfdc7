-- The ledger (sql/87_integrations.sql): jobs.ledger_post writes a posting balanced per
-- currency under a key unique per (ledger, tenant), fenced on the running job's claim;
-- the same key and lines answer the posting already written, other lines are refused
-- (SJ054), an unbalanced posting (SJ053) or a malformed one (SJ001) writes nothing;
-- ledger_balances and ledger_posting read it; the roles and a bound tenant's limits.
begin;
select plan(26);

set local jobs.notify = off;
create temp table c as select test.start('pay', 'p1', '{"queue": "q_pay", "tenant": "acme"}') as claim;
alter table c add column id bigint;
update c set id = test.jid('pay', 'p1');
grant select on c to public;

create function pg_temp.post(p_key text, p_lines jsonb, p_ledger text default 'main')
returns table (posting_id bigint, created boolean) language sql as $$
  select * from jobs.ledger_post((select id from c), (select claim from c), p_ledger, p_key,
                                 p_lines, 'memo')
$$;

-- refusals, nothing written -------------------------------------------------------------
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": "10.00"},
                                                       {"account": "sales", "currency": "EUR", "amount": "-9.99"}]') $$,
                 'SJ053', null, 'unbalanced in one currency: ledger_unbalanced');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": 10},
                                                       {"account": "sales", "currency": "USD", "amount": -10}]') $$,
                 'SJ053', null, 'balanced in sum but not per currency: ledger_unbalanced');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": 10}]') $$,
                 'SJ001', null, 'one line: invalid_argument');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "eur", "amount": 10},
                                                       {"account": "sales", "currency": "eur", "amount": -10}]') $$,
                 'SJ001', null, 'a lower-case currency: invalid_argument');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": 0},
                                                       {"account": "sales", "currency": "EUR", "amount": 0}]') $$,
                 'SJ001', null, 'a zero amount: invalid_argument');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": "1e3"},
                                                       {"account": "sales", "currency": "EUR", "amount": "-1e3"}]') $$,
                 'SJ001', null, 'an exponent is not a decimal: invalid_argument');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": 5, "x": 1},
                                                       {"account": "sales", "currency": "EUR", "amount": -5}]') $$,
                 'SJ001', null, 'an unknown field: invalid_argument');
select throws_ok($$ select * from pg_temp.post('', '[{"account": "cash", "currency": "EUR", "amount": 5},
                                                     {"account": "sales", "currency": "EUR", "amount": -5}]') $$,
                 'SJ001', null, 'an empty key: invalid_argument');
select throws_ok(format($$ select * from jobs.ledger_post(%s, %s, 'main', 'k1',
                          '[{"account": "cash", "currency": "EUR", "amount": 5},
                            {"account": "sales", "currency": "EUR", "amount": -5}]', null) $$,
                        (select id from c), (select claim from c) + 1),
                 'SJ004', null, 'another claim: lease_lost');
select is((select count(*) from jobs.ledger_posting)::int + (select count(*) from jobs.ledger_line)::int,
          0, 'the refusals wrote nothing');

-- a posting, posted once ------------------------------------------------------------------
select results_eq($$ select created from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": "10.50"},
                                                              {"account": "sales", "currency": "EUR", "amount": "-8.00"},
                                                              {"account": "vat", "currency": "EUR", "amount": "-2.50"}]') $$,
                  $$ values (true) $$, 'a balanced posting is written');
select results_eq($$ select created from pg_temp.post('k1', '[{"account": "vat", "currency": "EUR", "amount": -2.5},
                                                              {"account": "cash", "currency": "EUR", "amount": 10.5},
                                                              {"account": "sales", "currency": "EUR", "amount": -8}]') $$,
                  $$ values (false) $$, 'the same key and lines, in another order and scale: the same posting');
select is((select count(*) from jobs.ledger_posting)::int, 1, 'posted once');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": 11},
                                                       {"account": "sales", "currency": "EUR", "amount": -11}]') $$,
                 'SJ054', null, 'the same key with other lines: ledger_posting_conflict');
select throws_ok($$ select * from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": "10.50"},
                                                       {"account": "sales", "currency": "EUR", "amount": "-10.50"}]') $$,
                 'SJ054', null, 'the same total in other accounts is a conflict too');
select results_eq($$ select created from pg_temp.post('k1', '[{"account": "cash", "currency": "EUR", "amount": 1},
                                                              {"account": "sales", "currency": "EUR", "amount": -1}]', 'other') $$,
                  $$ values (true) $$, 'a key is per ledger');
select is((select tenant from jobs.ledger_posting where ledger = 'main'), 'acme', 'the posting is the job''s tenant''s');

select results_eq($$ select tenant, account, currency, balance, lines from jobs.ledger_balances('main') $$,
                  $$ values ('acme'::text, 'cash'::text, 'EUR'::text, 10.50::numeric, 1::bigint),
                            ('acme', 'sales', 'EUR', -8.00, 1), ('acme', 'vat', 'EUR', -2.50, 1) $$,
                  'ledger_balances: per account and currency');
select results_eq($$ select balance from jobs.ledger_balances('main', 'cash') $$,
                  $$ values (10.50::numeric) $$, 'ledger_balances of one account');
select results_eq($$ select line, account, amount, memo from jobs.ledger_posting('main', 'k1', 'acme') $$,
                  $$ values (1, 'cash'::text, 10.50::numeric, 'memo'::text), (2, 'sales', -8.00, 'memo'),
                            (3, 'vat', -2.50, 'memo') $$,
                  'ledger_posting: the lines in order');
select is((select count(*) from jobs.ledger_posting('main', 'k1'))::int, 0,
          'an unbound read names the tenant: none is another tenant''s key');

-- roles and tenants ---------------------------------------------------------------------
create role ledger_worker login;
grant sqljobs_worker to ledger_worker;
create role ledger_reader login;
grant sqljobs_reader to ledger_reader;
create role ledger_globex login;
grant sqljobs_reader to ledger_globex;
do $$ begin perform jobs.tenant_bind('ledger_globex', 'globex'); end $$;

set local session authorization ledger_worker;
select results_eq(format($$ select created from jobs.ledger_post(%s, %s, 'main', 'k2',
                           '[{"account": "cash", "currency": "EUR", "amount": 1},
                             {"account": "sales", "currency": "EUR", "amount": -1}]', null) $$,
                         (select id from c), (select claim from c)),
                  $$ values (true) $$, 'a worker posts under its job''s claim');
select throws_ok($$ select * from jobs.ledger_balances('main') $$, '42501', null,
                 'a worker does not read balances');
reset session authorization;

set local session authorization ledger_reader;
select throws_ok($$ select * from pg_temp.post('k3', '[{"account": "cash", "currency": "EUR", "amount": 1},
                                                       {"account": "sales", "currency": "EUR", "amount": -1}]') $$,
                 '42501', null, 'a reader may not post');
reset session authorization;

set local session authorization ledger_globex;
select is((select count(*) from jobs.ledger_balances('main'))::int, 0,
          'a session bound to globex sees none of acme''s balances');
select is((select count(*) from jobs.ledger_posting('main', 'k1', 'acme'))::int, 0,
          'nor acme''s posting by naming acme');
reset session authorization;

select * from finish();
rollback;
