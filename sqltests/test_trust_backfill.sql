-- Trust boundary of the backfill ledger (sql/85_factories.sql, sql/98_roles.sql), logged
-- in as each role: a worker writes the ledger only under a claim it holds (a guessed
-- token, another worker's job or a row it does not run is refused, SJ004) and has no
-- operator verb; a producer and a reader write nothing; nobody but the owner touches
-- the table; a tenant-bound worker or operator cannot reach another tenant's row.
begin;
select plan(16);

create role tbf_worker_a login in role sqljobs_worker;
create role tbf_worker_b login in role sqljobs_worker;
create role tbf_producer login in role sqljobs_producer;
create role tbf_reader login in role sqljobs_reader;
create role tbf_op_acme login in role sqljobs_operator;
create role tbf_worker_acme login in role sqljobs_worker;
set local jobs.notify = off;

-- worker A runs the backfill job
set local session authorization tbf_worker_a;
do $$ begin
  perform pg_catalog.set_config('tbf.id', (select e.id from jobs.enqueue('tbf.bf', 'k', '{}', '{"queue": "q_tbf"}') e)::text, true);
  perform pg_catalog.set_config('tbf.claim', (select c.claim from jobs.claim(array['q_tbf'], 'w-a', 1, 300) c)::text, true);
end $$;
select lives_ok(format('select * from jobs.backfill_begin(%s, %s, %L, %L, %L, null, null, %L, null, false, %L)',
                       current_setting('tbf.id'), current_setting('tbf.claim'), 'tbf.bf', '', 'prod', 's', 'a'),
                'worker A: begins the backfill it holds');
select lives_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 1, %L, 5)',
                       current_setting('tbf.id'), current_setting('tbf.claim'), 'tbf.bf', '', 'prod', '[5]'),
                'worker A: advances it');
select throws_ok($$ select * from jobs.backfill $$, '42501', null, 'worker: the table itself is not readable');
select throws_ok($$ select jobs.backfill_pause('tbf.bf', '', 'prod') $$, '42501', null, 'worker: pause is not granted');
select throws_ok($$ select jobs.backfill_cancel('tbf.bf', '', 'prod') $$, '42501', null, 'worker: cancel is not granted');
reset session authorization;

-- worker B guesses
set local session authorization tbf_worker_b;
select throws_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 2, %L, 999)',
                        current_setting('tbf.id'), current_setting('tbf.claim')::bigint + 1, 'tbf.bf', '', 'prod', '[999]'),
                 'SJ004', null, 'worker B: a guessed claim token is refused');
select throws_ok(format('select jobs.backfill_finish(%s, %s, %L, %L, %L)',
                        current_setting('tbf.id'), current_setting('tbf.claim')::bigint - 1, 'tbf.bf', '', 'prod'),
                 'SJ004', null, 'worker B: finishing it with a guessed token is refused');
do $$ begin
  perform pg_catalog.set_config('tbf.id_b', (select e.id from jobs.enqueue('tbf.own', 'k', '{}', '{"queue": "q_tbf_b"}') e)::text, true);
  perform pg_catalog.set_config('tbf.claim_b', (select c.claim from jobs.claim(array['q_tbf_b'], 'w-b', 1, 300) c)::text, true);
end $$;
select throws_ok(format('select jobs.backfill_advance(%s, %s, %L, %L, %L, 2, %L, 999)',
                        current_setting('tbf.id_b'), current_setting('tbf.claim_b'), 'tbf.bf', '', 'prod', '[999]'),
                 'SJ004', null, 'worker B: its own claim of another job cannot write the backfill''s row');
reset session authorization;
select results_eq($$ select rows_done, cursor from jobs.backfill where name = 'tbf.bf' $$,
                  $$ values (5::bigint, '[5]'::jsonb) $$, 'the row is what worker A wrote, nothing else');

set local session authorization tbf_producer;
select throws_ok($$ select * from jobs.backfills(null) $$, '42501', null, 'producer: the ledger is not readable');
select throws_ok($$ select jobs.backfill_resume('tbf.bf', '', 'prod') $$, '42501', null, 'producer: resume is not granted');
reset session authorization;

set local session authorization tbf_reader;
select is((select count(*) from jobs.backfills(null))::int, 1, 'reader: reads the ledger through jobs.backfills()');
select throws_ok($$ select jobs.backfill_pause('tbf.bf', '', 'prod') $$, '42501', null, 'reader: pause is not granted');
reset session authorization;

-- tenants: an operator bound to acme does not reach the untenanted row
select ok(jobs.tenant_bind('tbf_op_acme', 'acme') and jobs.tenant_bind('tbf_worker_acme', 'acme'), 'setup: bind acme');
set local session authorization tbf_op_acme;
select throws_ok($$ select jobs.backfill_pause('tbf.bf', '', 'prod') $$, 'SJ018', null,
                 'an operator bound to acme cannot pause a row of no tenant');
select is((select count(*) from jobs.backfills(null))::int, 0, 'and does not see it');
reset session authorization;

select * from finish();
rollback;
