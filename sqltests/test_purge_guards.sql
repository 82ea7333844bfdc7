-- jobs.purge never purges early: a job someone awaited (settle_watched) is kept at
-- least the awaited age (1 hour by default) after it finished; a parent is kept while
-- any of its children is live; a child is kept while its parent is live.
begin;
select plan(11);

set local jobs.notify = off;
-- (test.start / test.jid: sqltests/_helpers.sql)

-- ---------------------------------------------------------------- awaited
set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$
declare
  v_claim bigint;
begin
  v_claim := test.start('guard.job', 'w_watched', '{"queue": "qw"}', 3600);
  perform jobs.watch_outcome(test.jid('guard.job', 'w_watched'));      -- app.result is waiting
  perform jobs.ack(test.jid('guard.job', 'w_watched'), v_claim);
  v_claim := test.start('guard.job', 'w_plain', '{"queue": "qw"}', 3600);
  perform jobs.ack(test.jid('guard.job', 'w_plain'), v_claim);
end $$;
set local jobs.fake_now = '2030-01-01 00:30:00+00';
select results_eq($$ select deleted from jobs.purge(100, false, '{"succeeded": 60}') where what = 'job' $$,
                  $$ values (1::bigint) $$, 'succeeded 60 s, 30 min later: one job goes...');
select ok(test.jid('guard.job', 'w_watched') is not null and test.jid('guard.job', 'w_plain') is null,
          '...the unwatched one: an awaited job is kept for the awaited age (1 h)');
set local jobs.fake_now = '2030-01-01 01:00:01+00';
select results_eq($$ select deleted from jobs.purge(100, false, '{"succeeded": 60}') where what = 'job' $$,
                  $$ values (1::bigint) $$, 'past the awaited hour the awaited job goes too');
select results_eq($$ select deleted from jobs.purge(100, false, '{"succeeded": 0, "awaited": 0}')
                     where what = 'job' $$,
                  $$ values (0::bigint) $$, 'nothing left of them');

-- ---------------------------------------------------------------- parents and children
-- A parent runs step_invoke: its child is enqueued and the parent parks.
set local jobs.fake_now = '2030-02-01 00:00:00+00';
create temp table p1 as select id from jobs.enqueue('guard.parent', 'p1', '{}', '{"queue": "qp"}');
create temp table c_p1 as select id, claim from jobs.claim('{qp}', 'w', 1, 3600);
select is((select parked from jobs.step_invoke((select id from c_p1), (select claim from c_p1),
                                                array['child'], '[{"name": "guard.child", "key": "c1", "queue": "qc"}]')
            limit 1), true, 'setup: the parent awaits a live child (parked)');
-- the child finishes; its settlement wakes the parent, which is live again (ready)
create temp table c_c1 as select id, claim from jobs.claim('{qc}', 'w', 1, 3600);
select lives_ok(format('select jobs.ack(%s, %s, ''{"r": 1}'')', (select id from c_c1), (select claim from c_c1)),
                'setup: the child succeeds; the parent is ready to read its outcome');
set local jobs.fake_now = '2030-03-01 00:00:00+00';
select results_eq($$ select deleted from jobs.purge(100, false, '{"succeeded": 0}') where what = 'job' $$,
                  $$ values (0::bigint) $$,
                  'a finished child whose parent is live is kept (the parent''s step reads it)');

-- A second parent is cancelled while its child is still live.
create temp table c_p1b as select id, claim from jobs.claim('{qp}', 'w', 1, 3600);  -- p1 again
select lives_ok(format('select jobs.ack(%s, %s)', (select id from c_p1b), (select claim from c_p1b)),
                'setup: the first parent runs again and succeeds');
create temp table p2 as select id from jobs.enqueue('guard.parent', 'p2', '{}', '{"queue": "qp"}');
create temp table c_p2 as select id, claim from jobs.claim('{qp}', 'w', 1, 3600);
select lives_ok(format($f$ select * from jobs.step_invoke(%s, %s, array['child'],
                             '[{"name": "guard.child", "key": "c2", "queue": "qc2"}]');
                        select jobs.cancel(%s) $f$,
                       (select id from c_p2), (select claim from c_p2), (select id from c_p2)),
                'setup: the second parent parks on a live child, then is cancelled');
set local jobs.fake_now = '2030-04-01 00:00:00+00';
select results_eq($$ select deleted, remaining from jobs.purge(100, false, '{"succeeded": 0, "cancelled": 0}')
                     where what = 'job' $$,
                  $$ values (2::bigint, 0::bigint) $$,
                  'the first parent and its child go (both final); the cancelled parent is not eligible');
select ok(test.jid('guard.parent', 'p2') is not null and test.jid('guard.child', 'c2') is not null
          and test.jid('guard.parent', 'p1') is null and test.jid('guard.child', 'c1') is null,
          'a parent whose child is live stays, and so does the live child');

select * from finish();
rollback;
