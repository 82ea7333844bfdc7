-- jobs.relay keeps an ordering key's rows in stage order: a row is claimed only with
-- every earlier unpublished row of its key, so one key is never in flight in two relays.
begin;
select plan(7);

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

select * from finish();
rollback;
