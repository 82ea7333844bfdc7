-- jobs.progress(id, claim, progress): records progress of a running job under its
-- claim and answers true; false (changing nothing) when the fence fails. A progress
-- value nested 100 levels deep is refused (SJ001, sql/10_errors.sql jobs.check_value).
begin;
select plan(11);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
-- (test.start / test.job / test.jid: sqltests/_helpers.sql); c: the live claim token
create temp table c as select test.start('prog.job', 'k', '{"queue": "q_prog"}') as claim;

select is(jobs.progress(test.jid('prog.job', 'k'), (select claim from c), '{"done": 10, "of": 100}'), true,
          'progress under the current claim answers true');
select is((test.job('prog.job', 'k')).progress, '{"done": 10, "of": 100}'::jsonb, 'and is stored');
select is(jobs.progress(test.jid('prog.job', 'k'), (select claim from c), '{"done": 50, "of": 100}'), true, 'progress again');
select is((test.job('prog.job', 'k')).progress, '{"done": 50, "of": 100}'::jsonb, 'replaces the previous progress');
select is(jobs.progress(test.jid('prog.job', 'k'), (select claim from c) + 1, '{"done": 99}'), false,
          'under a wrong claim token (the live one + 1): false');
select is((test.job('prog.job', 'k')).progress, '{"done": 50, "of": 100}'::jsonb, 'and nothing changed');
select is(jobs.progress(-1, (select claim from c), '{}'), false, 'for a missing job: false');
select throws_ok(format('select jobs.progress(%s, %s, %L)', test.jid('prog.job', 'k'), (select claim from c),
                        repeat('[', 100) || '1' || repeat(']', 100)),
                 'SJ001', null, 'progress nested 100 levels deep is refused, under the live token too');
select is((test.job('prog.job', 'k')).progress, '{"done": 50, "of": 100}'::jsonb, 'and changed nothing');

do $$ begin perform jobs.ack(test.jid('prog.job', 'k'), (select claim from c)); end $$;
select is(jobs.progress(test.jid('prog.job', 'k'), (select claim from c), '{"done": 100}'), false,
          'after the job finished: false');
select is((test.job('prog.job', 'k')).progress, '{"done": 50, "of": 100}'::jsonb, 'the last progress is kept');

select * from finish();
rollback;
