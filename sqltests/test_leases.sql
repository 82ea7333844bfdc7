-- Named leases (fenced locks): jobs.lease_acquire / renew / release / holds / leases. One
-- holder at a time; the fencing token moves with every new holder and never goes back;
-- a deposed holder can neither renew nor release, and jobs.lease_holds refuses its token.
-- A token (sql/00_schema.sql, "Fencing tokens") is ((old >> 32) + 1) << 32 | 32 random
-- bits: its high half counts the holders, its low half is unguessable, and
-- jobs.leases() does not show it.
begin;
select plan(29);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create temp table tok (who text primary key, token bigint);
insert into tok values ('A1', jobs.lease_acquire('export', 'A', 10));
select is((select token >> 32 from tok where who = 'A1'), 1::bigint, 'A takes the lease: the first token (high half 1)');
select is(jobs.lease_acquire('export', 'B', 10), null::bigint, 'B is kept out while it is live');
insert into tok values ('other', jobs.lease_acquire('other', 'B', 10));
select is((select token >> 32 from tok where who = 'other'), 1::bigint, 'another name is another lease (its first token)');
select isnt((select token from tok where who = 'other'), (select token from tok where who = 'A1'),
            'whose token differs from the first lease''s (random low half)');
select is(jobs.lease_holds('export', (select token from tok where who = 'A1')), true, 'A''s token holds');
select is(jobs.lease_holds('export', 1), false, 'a guessed token (1) does not');
select is(jobs.lease_holds('export', (select token from tok where who = 'A1') + 1), false,
          'nor does the next number');
set local jobs.fake_now = '2030-01-01 00:00:05+00';
select is(jobs.lease_renew('export', 'A', (select token from tok where who = 'A1'), 10), true, 'A renews under its token');
select is((select lease_expires_at from jobs.leases() where name = 'export'),
          '2030-01-01 00:00:15+00'::timestamptz, 'to now + ttl');
select is(jobs.lease_renew('export', 'A', 1, 10), false, 'A''s name under a guessed token renews nothing');
select is(jobs.lease_acquire('export', 'A', 10), null::bigint,
          'acquiring again under the holder''s name answers null: only the token renews (names are public)');
select is(jobs.lease_holds('export', (select token from tok where who = 'A1')), true, 'and A still holds it');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
select is(jobs.lease_holds('export', (select token from tok where who = 'A1')), false, 'lapsed: the token holds nothing');
insert into tok values ('B2', jobs.lease_acquire('export', 'B', 10));
select results_eq($$ select token >> 32, token > (select t.token from tok t where t.who = 'A1'),
                            (token & 4294967295) <> ((select t.token from tok t where t.who = 'A1') & 4294967295)
                       from tok where who = 'B2' $$,
                  $$ values (2::bigint, true, true) $$,
                  'B takes the lapsed lease: the second token, greater, with other random bits');
select is(jobs.lease_renew('export', 'A', (select token from tok where who = 'A1'), 10), false, 'deposed A cannot renew');
select is(jobs.lease_release('export', 'A', (select token from tok where who = 'A1')), false, 'nor release');
select is(jobs.lease_holds('export', (select token from tok where who = 'A1')), false, 'A''s old token is refused');
select is(jobs.lease_holds('export', (select token from tok where who = 'B2')), true, 'B''s holds');
select is(jobs.lease_release('export', 'B', (select token from tok where who = 'A1') + 1), false,
          'B''s name under a guessed token (the old token + 1) releases nothing');
select results_eq($$ select name, holder, live from jobs.leases() $$,
                  $$ values ('export', 'B', true), ('other', 'B', false) $$,
                  'jobs.leases() lists both, and which is live');
select is((select count(*)::int from pg_catalog.pg_get_function_result('jobs.leases()'::regprocedure) r
            where r like '%token%'), 0, 'jobs.leases() has no token column');
select is(jobs.lease_release('export', 'B', (select token from tok where who = 'B2')), true, 'B releases');
insert into tok values ('A3', jobs.lease_acquire('export', 'A', 10));
select results_eq($$ select token >> 32, token > (select t.token from tok t where t.who = 'B2') from tok where who = 'A3' $$,
                  $$ values (3::bigint, true) $$,
                  'free at once; the token still moves up (the third)');
select throws_ok($$ select jobs.lease_acquire('', 'A', 10) $$, 'SJ001',
  'sqljobs.invalid_argument: a lease needs a name and a holder, each of at most 200 bytes', 'no name');
select throws_ok($$ select jobs.lease_acquire('scheduler', 'A', 10) $$, 'SJ001', null,
  'the scheduler''s leadership is not an application lock');
select throws_ok($$ select jobs.lease_acquire('sqljobs.x', 'A', 10) $$, 'SJ001', null, 'nor any sqljobs. name');
select throws_ok($$ select jobs.lease_acquire('x', 'A', 0) $$, 'SJ001',
  'sqljobs.invalid_argument: ttl_s must be positive and at most 1e9 seconds', 'a ttl of zero');
select throws_ok($$ select jobs.lease_renew('x', 'A', 1, 'Infinity') $$, 'SJ001', null, 'an infinite ttl');
select is((select count(*)::int from jobs.lease where name in ('', 'x')), 0, 'refusals write nothing');

select * from finish();
rollback;
