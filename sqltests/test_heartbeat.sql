-- jobs.heartbeat / heartbeat_many: extend a held lease to now + lease_s; false (ok =
-- false) when the job is no longer running under that claim, changing nothing.
begin;
select plan(17);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.job / test.jid / test.claim_of: sqltests/_helpers.sql)
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "hb.job", "key": "a", "queue": "q_hb"}, {"name": "hb.job", "key": "b", "queue": "q_hb"},
  {"name": "hb.job", "key": "c", "queue": "q_hb"}
]') $$, 'setup: three jobs');
select is((select count(*)::int from jobs.claim('{q_hb}', 'w', 3, 30)), 3, 'setup: claimed with a 30 s lease');
select lives_ok($$ select * from jobs.enqueue('hb.job', 'ready', '{}', '{"queue": "q_hb_r"}') $$, 'setup: a ready job');

set local jobs.fake_now = '2030-01-01 00:00:20+00';
select is(jobs.heartbeat(test.jid('hb.job', 'a'), test.claim_of('hb.job', 'a'), 45), true, 'a heartbeat under the current claim answers true');
select is((test.job('hb.job', 'a')).lease_expires_at, '2030-01-01 00:01:05+00'::timestamptz,
          'and sets the lease to now + lease_s');
select is(jobs.heartbeat(test.jid('hb.job', 'a'), test.claim_of('hb.job', 'a')), true, 'lease_s defaults...');
select is((test.job('hb.job', 'a')).lease_expires_at, '2030-01-01 00:00:50+00'::timestamptz, '...to 30 s (it may also shorten)');
select is(jobs.heartbeat(test.jid('hb.job', 'a'), test.claim_of('hb.job', 'a') + 1, 30), false,
          'under a wrong claim token (the live one + 1) it answers false');
select is(jobs.heartbeat(test.jid('hb.job', 'a'), test.claim_of('hb.job', 'b'), 30), false,
          'under another job''s claim token it answers false');
select is(jobs.heartbeat(test.jid('hb.job', 'ready'), 0, 30), false, 'for a job that is not running, false');
select is(jobs.heartbeat(-1, test.claim_of('hb.job', 'a'), 30), false, 'for a missing job, false');
select is((test.job('hb.job', 'ready')).lease_expires_at, null, 'a false heartbeat changed nothing');

create temp table r as
  select pg_catalog.row_number() over () as pos, h.*
    from jobs.heartbeat_many(array[test.jid('hb.job', 'c'), test.jid('hb.job', 'b'), test.jid('hb.job', 'a'),
                                   test.jid('hb.job', 'ready')],
                             array[test.claim_of('hb.job', 'c'), test.claim_of('hb.job', 'b') + 1,
                                   test.claim_of('hb.job', 'a'), 0], 100) h;
select results_eq($$ select id, ok from r order by pos $$,
                  $$ values (test.jid('hb.job', 'c'), true), (test.jid('hb.job', 'b'), false),
                            (test.jid('hb.job', 'a'), true), (test.jid('hb.job', 'ready'), false) $$,
                  'heartbeat_many answers (id, ok) per input in input order');
select results_eq($$ select key, lease_expires_at from jobs.job where name = 'hb.job' and key in ('a', 'b', 'c') order by key $$,
                  $$ values ('a', '2030-01-01 00:02:00+00'::timestamptz), ('b', '2030-01-01 00:00:30+00'::timestamptz),
                            ('c', '2030-01-01 00:02:00+00'::timestamptz) $$,
                  'only the held leases moved');

select throws_ok(format('select jobs.heartbeat(%s, 1, 0)', test.jid('hb.job', 'a')), 'SJ001', null,
                 'lease_s 0 is refused');
select throws_ok(format('select * from jobs.heartbeat_many(array[%s], array[1]::bigint[], null)', test.jid('hb.job', 'a')),
                 'SJ001', null, 'a null lease_s is refused');
select throws_ok(format('select * from jobs.heartbeat_many(array[%s], array[1, 1]::bigint[], 30)', test.jid('hb.job', 'a')),
                 'SJ001', null, 'ids and claims of different lengths are refused');

select * from finish();
rollback;
