-- jobs.attempts_push (sql/40_settle.sql) keeps the attempt history bounded: the last 20
-- entries, oldest first, whatever max_attempts is; and through jobs.nack_many, a job
-- that failed 25 times keeps attempts 6 to 25.
begin;
select plan(6);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

select is(jobs.attempts_push(null, '{"attempt": 1}'), '[{"attempt": 1}]'::jsonb,
          'the first entry makes the array');
select is(jobs.attempts_push('[{"attempt": 1}]', '{"attempt": 2}'),
          '[{"attempt": 1}, {"attempt": 2}]'::jsonb, 'an entry goes last');
select is(jobs.attempts_push((select pg_catalog.jsonb_agg(i) from pg_catalog.generate_series(1, 20) i), '21'),
          (select pg_catalog.jsonb_agg(i) from pg_catalog.generate_series(2, 21) i),
          'at 20 entries the oldest is dropped');
select is(jobs.attempts_push((select pg_catalog.jsonb_agg(i) from pg_catalog.generate_series(1, 30) i), '31'),
          (select pg_catalog.jsonb_agg(i) from pg_catalog.generate_series(12, 31) i),
          'a longer history is cut to the last 20');

-- through nack_many: 25 failed attempts of one job
do $$
declare
  v_id    bigint;
  v_claim bigint;
begin
  perform jobs.enqueue('bound.job', 'b', '{}', '{"queue": "q_bound", "max_attempts": 30}');
  for i in 1 .. 25 loop
    select c.id, c.claim into strict v_id, v_claim from jobs.claim('{q_bound}', 'w', 1, 30) c;
    perform jobs.nack(v_id, v_claim, pg_catalog.jsonb_build_object('message', 'fail ' || i),
                      'retry', 0);
  end loop;
end $$;
select is((select pg_catalog.jsonb_array_length(j.attempts) from jobs.job j where j.name = 'bound.job'), 20,
          '25 failed attempts keep 20 entries');
select is((select array(select (e->>'attempt')::int from jobs.job j,
                               pg_catalog.jsonb_array_elements(j.attempts) e
                         where j.name = 'bound.job')),
          array(select i from pg_catalog.generate_series(6, 25) i),
          'the last 20: attempts 6 to 25, oldest first');

select * from finish();
rollback;
