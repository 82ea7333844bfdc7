-- jobs.fence_run(id, claim): a write made inside a run goes through only while the run
-- holds its job (running under that claim); else lease_lost (SJ004).
begin;
select plan(4);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ declare c bigint; begin
  perform jobs.enqueue('fr.job', 'a', '{}', '{"queue": "q_fr"}');
  select cl.claim into c from jobs.claim('{q_fr}', 'w', 1, 30) cl;
  perform pg_catalog.set_config('t.c', c::text, true);
  perform pg_catalog.set_config('t.id', (select id from jobs.job where key = 'a')::text, true);
end $$;

select lives_ok($$ select jobs.fence_run(current_setting('t.id')::bigint, current_setting('t.c')::bigint) $$,
                'the running job under its claim passes');
select throws_ok($$ select jobs.fence_run(current_setting('t.id')::bigint, current_setting('t.c')::bigint + 1) $$,
                 'SJ004', null, 'another claim is refused');
select jobs.cancel(current_setting('t.id')::bigint);
select throws_ok($$ select jobs.fence_run(current_setting('t.id')::bigint, current_setting('t.c')::bigint) $$,
                 'SJ004', null, 'a cancelled job''s run is refused');
select throws_ok($$ select jobs.fence_run(-1, 1) $$, 'SJ004', null, 'a missing job is refused');

select * from finish();
rollback;
