-- jobs.claim option "version": a claim takes only jobs never claimed or first claimed
-- with its version, and records the version on a job's first claim; a claim without
-- the option takes any job and records nothing.
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
set local jobs.notify = off;
do $$ begin
  perform jobs.enqueue('cv.job', 'a', '{}', '{"queue": "q_cv"}');
  perform jobs.enqueue('cv.job', 'b', '{}', '{"queue": "q_cv"}');
  perform jobs.enqueue('cv.job', 'c', '{}', '{"queue": "q_cv"}');
end $$;

select is((select j.key from jobs.claim('{q_cv}', 'w1', 1, 30, '{"version": "v1"}') c
             join jobs.job j using (id)), 'a', 'v1 claims a, never claimed before');
select is((select code_version from jobs.job where key = 'a'), 'v1', 'a records v1');
-- (ids read first: distributed on Citus, a function per row of a query over the jobs would
-- run on a shard)
do $$ begin
  perform jobs.nack(x.id, x.claim, null, 'retry', 0)
     from (with x as materialized (select j.id, j.claim from jobs.job j where j.key = 'a')
           select * from x) x;
end $$;

select is((select pg_catalog.array_agg(j.key order by j.key)
             from jobs.claim('{q_cv}', 'w2', 10, 30, '{"version": "v2"}') c join jobs.job j using (id)),
          '{b,c}'::text[], 'v2 skips a (first claimed by v1) and takes b and c');
select is((select pg_catalog.array_agg(code_version order by key) from jobs.job where name = 'cv.job'),
          '{v1,v2,v2}'::text[], 'b and c record v2');
select is((select j.key from jobs.claim('{q_cv}', 'w1', 10, 30, '{"version": "v1"}') c
             join jobs.job j using (id)), 'a', 'v1 takes its retry of a');

do $$ begin
  perform jobs.nack(x.id, x.claim, null, 'retry', 0)
     from (with x as materialized (select j.id, j.claim from jobs.job j where j.key = 'a')
           select * from x) x;
  perform jobs.enqueue('cv.job', 'd', '{}', '{"queue": "q_cv"}');
end $$;
select is((select pg_catalog.array_agg(j.key order by j.key)
             from jobs.claim('{q_cv}', 'w3', 10, 30) c join jobs.job j using (id)),
          '{a,d}'::text[], 'a claim without a version takes any job');
select is((select code_version from jobs.job where key = 'd'), null, 'and records none');

select throws_ok($$ select from jobs.claim('{q_cv}', 'w1', 1, 30, '{"version": 2}') $$,
                 'SJ001', null, 'a version that is not a string is refused');

select * from finish();
rollback;
