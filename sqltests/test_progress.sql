-- jobs.progress(id, claim, progress): records progress of a running job under its
-- claim and answers true; false (changing nothing) when the fence fails.
begin;
select plan(9);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
create function jobs_test.job() returns jobs.job language sql as $$
  select j from jobs.job j where j.name = 'prog.job' and j.key = 'k'
$$;
do $$ begin
  perform jobs.enqueue('prog.job', 'k', '{}', '{"queue": "q_prog"}');
  perform from jobs.claim('{q_prog}', 'w', 1, 30);
end $$;

select is(jobs.progress((jobs_test.job()).id, 1, '{"done": 10, "of": 100}'), true,
          'progress under the current claim answers true');
select is((jobs_test.job()).progress, '{"done": 10, "of": 100}'::jsonb, 'and is stored');
select is(jobs.progress((jobs_test.job()).id, 1, '{"done": 50, "of": 100}'), true, 'progress again');
select is((jobs_test.job()).progress, '{"done": 50, "of": 100}'::jsonb, 'replaces the previous progress');
select is(jobs.progress((jobs_test.job()).id, 2, '{"done": 99}'), false, 'under a wrong claim token: false');
select is((jobs_test.job()).progress, '{"done": 50, "of": 100}'::jsonb, 'and nothing changed');
select is(jobs.progress(-1, 1, '{}'), false, 'for a missing job: false');

do $$ begin perform jobs.ack((select j.id from jobs.job j where j.name = 'prog.job'), 1); end $$;
select is(jobs.progress((jobs_test.job()).id, 1, '{"done": 100}'), false, 'after the job finished: false');
select is((jobs_test.job()).progress, '{"done": 50, "of": 100}'::jsonb, 'the last progress is kept');

select * from finish();
rollback;
