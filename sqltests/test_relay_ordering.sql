-- jobs.relay keeps an ordering key's rows in stage order: a row is claimed only with
-- every earlier unpublished row of its key, so one key is never in flight in two relays.
-- A key is ordered within its tenant (version 2): the same ordering key of two tenants is
-- two keys.
begin;
select plan(11);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.stage_many('[
  {"name": "ro.job", "key": "k1", "ordering_key": "acct"},
  {"name": "ro.job", "key": "free1"},
  {"name": "ro.job", "key": "k2", "ordering_key": "acct"},
  {"name": "ro.job", "key": "k3", "ordering_key": "acct"},
  {"name": "ro.job", "key": "free2"}]') $$, 'setup: three rows of key acct, two free rows');

select is((select held from jobs.relay(1, 'A', 30)), 1, 'A claims the head of acct');
select is((select held from jobs.relay(10, 'B', 30)), 2,
          'B claims only the free rows: acct''s next rows wait behind A''s');
select results_eq($$ select key from jobs.outbox where claimed_by = 'B' order by id $$,
                  $$ values ('free1'), ('free2') $$, 'the free rows');
select is((select published from jobs.relay(10, 'A', 30)), 1, 'A publishes k1 ...');
select results_eq($$ select key from jobs.outbox where claimed_by = 'A' and published_at is null
                      order by id $$,
                  $$ values ('k2'), ('k3') $$, '... and, the head gone, claims k2 and k3 together');
select is((select count(*)::int from jobs.relay(0, 'A', 30) r, jobs.relay(0, 'B', 30) s), 1,
          'both publish what they hold');

-- ---------------------------------------------------------------- per tenant
select lives_ok($$ select jobs.stage_many('[
  {"name": "ro.t", "key": "t1a", "ordering_key": "shared", "tenant": "t1"},
  {"name": "ro.t", "key": "t2a", "ordering_key": "shared", "tenant": "t2"}]') $$,
  'setup: one row of key shared in each of two tenants');
select is((select held from jobs.relay(10, 'C', 30)), 1,
          'C takes one of the two keys (its fair share: two keys, not one)');
select is((select held from jobs.relay(10, 'D', 30)), 1,
          'D takes the other tenant''s row of the same key: it does not wait behind C''s');
select results_eq($$ select tenant, claimed_by from jobs.outbox where name = 'ro.t' order by id $$,
                  $$ values ('t1', 'C'), ('t2', 'D') $$,
                  'the key shared is in flight in two relays, once per tenant');

select * from finish();
rollback;
