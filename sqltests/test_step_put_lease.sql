-- jobs.step_put extends the lease in the same call (now + lease_s); with lease_s null
-- it leaves the lease as it was.
begin;
select plan(5);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue('step.job', 'k1', '{}', '{"queue": "q_step"}') $$,
                'setup: a job');
create temp table c1 as select id, claim from jobs.claim('{q_step}', 'w', 1, 30);

set local jobs.fake_now = '2030-01-01 00:00:20+00';
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L, 30)', (select id from c1),
                       (select claim from c1), 'a', '1'), 'a put with lease_s = 30');
select is((select lease_expires_at from jobs.job where id = (select id from c1)),
          '2030-01-01 00:00:50+00'::timestamptz, 'the lease now ends 30 s after the put');
select lives_ok(format('select jobs.step_put(%s, %s, %L, %L)', (select id from c1),
                       (select claim from c1), 'b', '1'), 'a put without lease_s');
select is((select lease_expires_at from jobs.job where id = (select id from c1)),
          '2030-01-01 00:00:50+00'::timestamptz, 'leaves the lease as it was');
select * from finish();
rollback;
