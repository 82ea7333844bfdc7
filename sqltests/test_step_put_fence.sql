-- jobs.step_put writes only while the job is running under the caller's claim: a stale
-- claim, a job no longer running, or a missing job raise lease_lost (SJ004) and write
-- nothing. Bad names, oversized and too deeply nested values are refused with their
-- codes.
begin;
select plan(12);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('step.job', 'k1', '{}', '{"queue": "q_step"}') $$,
                'setup: a job');
create temp table c1 as select id, claim from jobs.claim('{q_step}', 'w', 1, 30);

select is(jobs.step_put((select id from c1), (select claim from c1), 'a', '{"x": 1}'),
          '{"x": 1}'::jsonb, 'a put under the live claim answers the stored value');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                        (select claim from c1) + 1, 'b', '1'),
                 'SJ004', null, 'a put under another claim is lease_lost');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1), 1, 'b', '1'),
                 'SJ004', null, 'so is a put under a guessed token (1)');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', -1, 1, 'b', '1'),
                 'SJ004', null, 'a put for a missing job is lease_lost');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                        (select claim from c1), '', '1'),
                 'SJ001', null, 'an empty step name is refused');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                        (select claim from c1), repeat('s', 201), '1'),
                 'SJ001', null, 'a step name over 200 bytes is refused');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                        (select claim from c1), 'deep', repeat('[', 150) || '1' || repeat(']', 150)),
                 'SJ001', null, 'a value nested 150 levels deep is refused');
set local jobs.max_payload_bytes = 10;
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                        (select claim from c1), 'big', '"more than ten bytes"'),
                 'SJ002', null, 'a value over the payload limit is refused');
reset jobs.max_payload_bytes;

-- cancelled while running: the run writes nothing more
select lives_ok(format('select jobs.cancel(%s)', (select id from c1)), 'setup: cancel it');
select throws_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                        (select claim from c1), 'c', '1'),
                 'SJ004', null, 'a cancelled job takes no more steps');
select results_eq($$ select name from jobs.step order by ordinal $$, $$ values ('a') $$,
                  'only the fenced put was written');

select * from finish();
rollback;
