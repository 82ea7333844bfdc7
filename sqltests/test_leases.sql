-- Named leases (fenced locks): jobs.lease_acquire / renew / release / holds / leases. One
-- holder at a time; the fencing token moves with every new holder and never goes back;
-- a deposed holder can neither renew nor release, and jobs.lease_holds refuses its token.
begin;
select plan(20);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select is(jobs.lease_acquire('export', 'A', 10), 1::bigint, 'A takes the lease: token 1');
select is(jobs.lease_acquire('export', 'B', 10), null::bigint, 'B is kept out while it is live');
select is(jobs.lease_acquire('other', 'B', 10), 1::bigint, 'another name is another lease');
select is(jobs.lease_holds('export', 1), true, 'A''s token holds');
set local jobs.fake_now = '2030-01-01 00:00:05+00';
select is(jobs.lease_renew('export', 'A', 1, 10), true, 'A renews under its token');
select is((select lease_expires_at from jobs.leases() where name = 'export'),
          '2030-01-01 00:00:15+00'::timestamptz, 'to now + ttl');
select is(jobs.lease_acquire('export', 'A', 10), 1::bigint, 'acquiring again as the holder renews, same token');
set local jobs.fake_now = '2030-01-01 00:00:15+00';
select is(jobs.lease_holds('export', 1), false, 'lapsed: the token holds nothing');
select is(jobs.lease_acquire('export', 'B', 10), 2::bigint, 'B takes the lapsed lease: token 2');
select is(jobs.lease_renew('export', 'A', 1, 10), false, 'deposed A cannot renew');
select is(jobs.lease_release('export', 'A', 1), false, 'nor release');
select is(jobs.lease_holds('export', 1), false, 'A''s old token is refused');
select is(jobs.lease_holds('export', 2), true, 'B''s holds');
select results_eq($$ select name, holder, token, live from jobs.leases() $$,
                  $$ values ('export', 'B', 2::bigint, true), ('other', 'B', 1::bigint, false) $$,
                  'jobs.leases() lists both, and which is live');
select is(jobs.lease_release('export', 'B', 2), true, 'B releases');
select is(jobs.lease_acquire('export', 'A', 10), 3::bigint, 'free at once; the token still moves up');
select throws_ok($$ select jobs.lease_acquire('', 'A', 10) $$, 'SJ001',
  'sqljobs.invalid_argument: a lease needs a name (at most 200 characters) and a holder', 'no name');
select throws_ok($$ select jobs.lease_acquire('x', 'A', 0) $$, 'SJ001',
  'sqljobs.invalid_argument: ttl_s must be positive and at most 1e9 seconds', 'a ttl of zero');
select throws_ok($$ select jobs.lease_renew('x', 'A', 1, 'Infinity') $$, 'SJ001', null, 'an infinite ttl');
select is((select count(*)::int from jobs.lease where name in ('', 'x')), 0, 'refusals write nothing');

select * from finish();
rollback;
