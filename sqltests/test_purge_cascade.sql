-- What goes with a purged job: its steps and event waits, and the published outbox row
-- that created it (same id). An unpublished row, and a deduped row (its key already had
-- a job), are left to the relay's own sweep (jobs.purge_outbox). Events go by age, but
-- never one a live waiting job may still look back to.
begin;
select plan(10);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';

-- a job with a stored step, a cancelled job with a left-over wait (parked, then cancelled)
do $$ begin perform jobs.enqueue('cas.job', 'k1', '{}', '{"queue": "qa"}'); end $$;
create temp table c1 as select id, claim from jobs.claim('{qa}', 'w', 1, 3600);
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L); select jobs.ack(%s, %s)',
                       (select id from c1), (select claim from c1), 's1', '{"v": 1}',
                       (select id from c1), (select claim from c1)),
                'setup: a job with a step, succeeded');
do $$ begin perform jobs.enqueue('cas.job', 'k2', '{}', '{"queue": "qb"}'); end $$;
create temp table c2 as select id, claim from jobs.claim('{qb}', 'w', 1, 3600);
select lives_ok(format('select * from jobs.step_wait(%s, %s, %L, %L); select jobs.cancel(%s)',
                       (select id from c2), (select claim from c2), 'w', '[{"event": "never"}]',
                       (select id from c2)),
                'setup: a job parked on an event wait, then cancelled');
-- the outbox: one row published as a job (created), one deduped, one not published yet
select lives_ok($$ select jobs.stage('cas.staged', 'k3');
                   select jobs.stage('cas.other', 'k6');
                   select jobs.enqueue('cas.other', 'k6', '{}', '{"queue": "qd"}');
                   select jobs.relay(10, 'R', 30); select jobs.relay(0, 'R', 30);
                   select jobs.stage('cas.staged', 'k4') $$,
                'setup: staged rows: k3 published (created), k6 published (deduped: enqueued meanwhile), k4 not');
create temp table c3 as select id, claim from jobs.claim('{default}', 'w', 1, 3600);
select lives_ok(format('select jobs.ack(%s, %s)', (select id from c3), (select claim from c3)),
                'setup: the staged job runs and succeeds');

set local jobs.fake_now = '2030-06-01 00:00:00+00';
select results_eq($$ select what, deleted from jobs.purge(100) order by what $$,
                  $$ values ('event', 0::bigint), ('job', 3), ('outbox', 1) $$,
                  'three jobs go, and the one outbox row that created one of them');
select results_eq($$ select (select count(*) from jobs.step)::int, (select count(*) from jobs.event_wait)::int $$,
                  $$ values (0, 0) $$, 'their steps and waits went with them (on delete cascade)');
select results_eq($$ select key, published_at is not null, outcome from jobs.outbox order by key $$,
                  $$ values ('k4', false, null::text), ('k6', true, 'deduped') $$,
                  'the deduped row and the unpublished row stay (the relay''s age sweep takes the first)');

-- ---------------------------------------------------------------- events
select lives_ok($$ select jobs.emit_event('old', '{}') $$, 'setup: an event at 2030-06-01');
set local jobs.fake_now = '2030-06-05 00:00:00+00';
do $$ begin perform jobs.enqueue('cas.job', 'k5', '{}', '{"queue": "qc"}'); end $$;
create temp table c4 as select id, claim from jobs.claim('{qc}', 'w', 1, 3600);
select lives_ok(format($f$ select jobs.emit_event('mid', '{}');
                           select * from jobs.step_wait(%s, %s, 'w', '[{"event": "later"}]') $f$,
                       (select id from c4), (select claim from c4)),
                'setup: a job started at 06-05 waits (parked); an event at 06-05');
set local jobs.fake_now = '2030-07-01 00:00:00+00';
select results_eq($$ select deleted, remaining from jobs.purge(100) where what = 'event' $$,
                  $$ values (1::bigint, 0::bigint) $$,
                  'events older than 7 days go, but not one a live waiting job may still look back to');

select * from finish();
rollback;
