-- jobs.stage / jobs.stage_many: a staged row's id is its future job's id, and staging
-- shares the job's idempotency namespace: a key with an unpublished staged row or a job
-- answers that id as 'deduped' and writes nothing.
begin;
select plan(10);

set local jobs.notify = off;
select results_eq($$ select outcome from jobs.stage('st.job', 'a', '{"n": 1}') $$,
                  $$ values ('staged') $$, 'a new key is staged');
select is((select id from jobs.stage('st.job', 'a', '{"n": 2}')),
          (select id from jobs.outbox where key = 'a'),
          'staging the key again answers the staged row''s id');
select is((select outcome from jobs.stage('st.job', 'a', '{"n": 2}')), 'deduped',
          '... as deduped');
select is((select payload->>'n' from jobs.outbox o, jsonb_to_record(o.spec) as s(payload jsonb)
            where o.key = 'a'), '1', 'the first payload is kept');
select is((select count(*)::int from jobs.outbox), 1, 'one staged row');

select lives_ok($$ select jobs.enqueue('st.job', 'b', '{}') $$, 'setup: a job for key b');
select results_eq($$ select id, outcome from jobs.stage('st.job', 'b', '{}') $$,
                  $$ select id, 'deduped'::text from jobs.job where key = 'b' $$,
                  'a key that already has a job answers the job''s id as deduped');

select results_eq(
  $$ select ord, outcome from jobs.stage_many('[{"name": "st.job", "key": "c"},
       {"name": "st.job", "key": "c"}, {"name": "st.job", "key": "c", "tenant": "t1"}]') $$,
  $$ values (1, 'staged'), (2, 'deduped'), (3, 'staged') $$,
  'a key repeated in one batch is staged once; a tenant makes another key');
select is((select count(distinct id)::int from jobs.stage_many('[{"name": "st.job", "key": "c"},
       {"name": "st.job", "key": "c"}]')), 1, 'the repeats answer one id');
select is((select count(*)::int from jobs.outbox), 3, 'no row written for a deduped spec');

select * from finish();
rollback;
