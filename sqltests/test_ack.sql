-- jobs.ack(id, claim, result): running -> succeeded with the result, finished now.
-- Fenced on state = running AND the claim token: otherwise lease_lost (SJ004), nothing changes.
begin;
select plan(20);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.job / test.claim_of: sqltests/_helpers.sql)
create temp table tok (key text primary key, claim bigint);
insert into tok select 'a', test.start('ack.job', 'a', '{"queue": "q_ack_a"}');
set local jobs.fake_now = '2030-01-01 00:00:10+00';

-- ---------------------------------------------------------------- the fence
select throws_ok(format('select jobs.ack(%s, %s, %L)', test.jid('ack.job', 'a'),
                        test.claim_of('ack.job', 'a') + 1, '{"total": 1}'),
                 'SJ004', null, 'ack under a wrong claim token (the live one + 1) raises lease_lost');
select throws_ok(format('select jobs.ack(%s, 0)', test.jid('ack.job', 'a')),
                 'SJ004', null, 'ack under claim token 0 raises lease_lost');
select results_eq(
  $$ select state, result, finished_at, lease_expires_at from jobs.job where name = 'ack.job' and key = 'a' $$,
  $$ values ('running'::jobs.job_state, null::jsonb, null::timestamptz, '2030-01-01 00:00:30+00'::timestamptz) $$,
  'the refused acks changed nothing');

-- ---------------------------------------------------------------- success
select lives_ok(format('select jobs.ack(%s, %s, %L)', test.jid('ack.job', 'a'),
                       (select claim from tok where key = 'a'), '{"total": 3, "ok": [1, 2]}'),
                'ack under the current claim token (the one the claim answered)');
select results_eq(
  $$ select state, result, finished_at, lease_expires_at, attempt, claim
       from jobs.job where name = 'ack.job' and key = 'a' $$,
  $$ values ('succeeded'::jobs.job_state, '{"total": 3, "ok": [1, 2]}'::jsonb,
             '2030-01-01 00:00:10+00'::timestamptz, null::timestamptz, 1,
             (select claim from tok where key = 'a')) $$,
  'succeeded: the result is stored, finished_at = now, the lease cleared, the claim token kept');
select throws_ok(format('select jobs.ack(%s, %s, %L)', test.jid('ack.job', 'a'),
                        test.claim_of('ack.job', 'a'), '"again"'),
                 'SJ004', null, 'a second ack (the job is no longer running) raises lease_lost');
select is((test.job('ack.job', 'a')).result, '{"total": 3, "ok": [1, 2]}'::jsonb, 'and keeps the first result');

-- ---------------------------------------------------------------- an earlier attempt's error
select lives_ok($$ select test.start('ack.job', 'e', '{"queue": "q_ack_e"}') $$, 'setup: a running job');
select lives_ok(format('select jobs.nack(%s, %s, %L, %L, 0)', test.jid('ack.job', 'e'),
                       test.claim_of('ack.job', 'e'),
                       '{"kind": "error", "message": "boom"}', 'retry'),
                'setup: the first attempt fails');
select lives_ok(format('select jobs.ack(c.id, c.claim) from jobs.claim(%L, %L, 1, 30) c',
                       '{q_ack_e}', 'w'), 'the second attempt succeeds');
select results_eq(
  $$ select state, last_error->>'message', last_error->'historical', (last_error->>'attempt')::int
       from jobs.job where name = 'ack.job' and key = 'e' $$,
  $$ values ('succeeded'::jobs.job_state, 'boom', 'true'::jsonb, 1) $$,
  'the first attempt''s error is kept, marked historical');

insert into tok select 'n', test.start('ack.job', 'n', '{"queue": "q_ack_n"}');
select lives_ok(format('select jobs.ack(%s, %s)', test.jid('ack.job', 'n'),
                       (select claim from tok where key = 'n')), 'ack with no result');
select results_eq($$ select state, result from jobs.job where name = 'ack.job' and key = 'n' $$,
                  $$ values ('succeeded'::jobs.job_state, null::jsonb) $$, 'succeeded with a null result');

insert into tok select 's', test.start('ack.job', 's', '{"queue": "q_ack_s"}');
select lives_ok(format('select jobs.ack(%s, %s, %L)', test.jid('ack.job', 's'),
                       (select claim from tok where key = 's'), '"plain string"'),
                'ack with a scalar result');
select is((test.job('ack.job', 's')).result, '"plain string"'::jsonb, 'any jsonb result is stored as given');

-- ---------------------------------------------------------------- not running
select lives_ok($$ select * from jobs.enqueue('ack.job', 'ready', '{}', '{"queue": "q_ack_ready"}') $$,
                'setup: a ready job');
select throws_ok(format('select jobs.ack(%s, 0)', test.jid('ack.job', 'ready')), 'SJ004', null,
                 'ack of a ready job (claim 0) raises lease_lost');
select is((test.job('ack.job', 'ready')).state, 'ready'::jobs.job_state, 'it stays ready');
select throws_ok('select jobs.ack(-1, 1)', 'SJ004', null, 'ack of a job that does not exist raises lease_lost');
select throws_ok(format('select jobs.ack(%s, %s)', test.jid('ack.job', 'n'), test.claim_of('ack.job', 'n')), 'SJ004', null,
                 'ack of a finished job raises lease_lost');

select * from finish();
rollback;
