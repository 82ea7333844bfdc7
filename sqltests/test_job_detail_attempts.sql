-- jobs.job_detail's "attempts" (sql/92_introspection.sql): the job's attempt history,
-- oldest first, [] when it has none, redacted as last_error is (every sensitive value
-- of the payload replaced inside its strings).
begin;
select plan(7);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$
declare
  v_id bigint;
  v_claim bigint;
begin
  perform jobs.job_type_put('det.card', '{"sensitive": ["card"]}');
  perform jobs.enqueue('det.card', 'c', '{"card": "4111-1111-1111"}', '{"queue": "q_det", "max_attempts": 2}');
  perform jobs.enqueue('det.card', 'fresh', '{"card": "5500-0000-0000"}', '{"queue": "q_det_fresh"}');
  for i in 1 .. 2 loop
    select c.id, c.claim into strict v_id, v_claim from jobs.claim('{q_det}', 'w', 1, 30) c;
    perform jobs.nack(v_id, v_claim, pg_catalog.jsonb_build_object(
      'kind', 'error', 'message', 'card 4111-1111-1111 declined (' || i || ')',
      'traceback', 'Traceback:' || chr(10) || '  charge("4111-1111-1111")' || chr(10) || 'Declined'),
      'retry', 0);
  end loop;
end $$;

create temp table d as
  select jobs.job_detail((select j.id from jobs.job j where j.key = 'c')) as detail,
         jobs.job_detail((select j.id from jobs.job j where j.key = 'fresh')) as fresh;

select is((select fresh->'attempts' from d), '[]'::jsonb, 'a job with no failed attempt: attempts []');
select is((select pg_catalog.jsonb_array_length(detail->'attempts') from d), 2, 'two attempts');
select is((select array[detail->'attempts'->0->>'outcome', detail->'attempts'->1->>'outcome'] from d),
          array['retry', 'dead'], 'oldest first: retried, then dead');
select is((select (detail->'attempts')::text like '%4111-1111-1111%' from d), false,
          'no sensitive value in the attempts (message nor traceback)');
select is((select detail->'attempts'->0->'error'->>'message' from d), 'card [redacted] declined (1)',
          'the message is redacted in place');
select is((select detail->'attempts'->1->'error' from d), (select detail->'job'->'last_error' from d),
          'the last entry''s error is redacted as last_error is');
-- (the job read first: distributed on Citus, a function per row of a query over the
-- jobs would run on a shard)
select is((with j as materialized (select * from jobs.job where key = 'c')
           select jobs.job_detail(j.id)->'attempts' from j)
            = (with j as materialized (select * from jobs.job where key = 'c')
               select pg_catalog.jsonb_agg(e) from j,
                      pg_catalog.jsonb_array_elements(jobs.redact_output(j.name, j.payload, j.attempts)) e),
          true, 'the same redaction as every output of the job (jobs.redact_output)');

select * from finish();
rollback;
