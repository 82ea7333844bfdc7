-- The actor (who asked for a job) is a spec field: stored, shown by jobs.job_view,
-- answered by jobs.claim_v2 (jobs.claim keeps version 1's columns), refused with
-- invalid_actor (SJ023) and nothing written when malformed; inherited by step_invoke's
-- children, and by what a run enqueues, stages and emits after jobs.fence_run, unless
-- the write names an actor of its own. claim_v2 and emit_event_v2 are granted as claim
-- and emit_event are: logged in as each role that may and may not.
begin;
select plan(27);

set local jobs.fake_now = '2030-01-01 00:00:00+00';

-- STORED AND SHOWN
select lives_ok($$ select jobs.enqueue('act.job', 's', '{}', '{"queue": "q_act", "actor": "user:42"}') $$,
                'a string actor is accepted');
select lives_ok($$ select jobs.enqueue('act.job', 'o', '{}', '{"queue": "q_act_o", "actor": {"user": "42", "via": "api"}}') $$,
                'an object actor is accepted');
select lives_ok($$ select jobs.enqueue('act.job', 'n', '{}', '{"queue": "q_act_n", "actor": null}') $$,
                'a JSON null actor is no actor');
select results_eq($$ select key, actor from jobs.job_view where name = 'act.job' order by key $$,
                  $$ values ('n', null::jsonb), ('o', '{"user": "42", "via": "api"}'::jsonb), ('s', '"user:42"'::jsonb) $$,
                  'job_view shows each actor');

-- CLAIMED: claim_v2 answers it, claim keeps version 1's columns
select results_eq($$ select key, actor from jobs.claim_v2('{q_act}', 'w', 1, 30) $$,
                  $$ values ('s', '"user:42"'::jsonb) $$, 'claim_v2 answers the actor');
select is((select count(*)::int from information_schema.routines r
             join information_schema.parameters p on p.specific_name = r.specific_name
            where r.routine_schema = 'jobs' and r.routine_name = 'claim'
              and p.parameter_mode = 'OUT' and p.parameter_name = 'actor'), 0,
          'jobs.claim answers no actor column (its version 1 result)');
select results_eq($$ select key from jobs.claim('{q_act_o}', 'w', 1, 30) $$,
                  $$ values ('o') $$, 'jobs.claim still claims, through claim_v2');

-- REFUSED (SJ023) before any write
select throws_ok($$ select jobs.enqueue('act.bad', 'a', '{}', '{"actor": 42}') $$,
                 'SJ023', null, 'a number is refused');
select throws_ok($$ select jobs.enqueue('act.bad', 'b', '{}', '{"actor": ""}') $$,
                 'SJ023', null, 'an empty string is refused');
select throws_ok($$ select jobs.enqueue('act.bad', 'c', '{}', '{"actor": ["a"]}') $$,
                 'SJ023', null, 'an array is refused');
select throws_ok(format($$ select jobs.enqueue('act.bad', 'd', '{}', %L) $$,
                        jsonb_build_object('actor', repeat('x', 520))),
                 'SJ023', null, 'an actor over 512 bytes is refused');
select throws_ok($$ select * from jobs.enqueue_many('[{"name": "act.bad", "key": "e", "actor": "ok"},
                                                     {"name": "act.bad", "key": "f", "actor": true}]') $$,
                 'SJ023', 'sqljobs.invalid_actor: spec 2: an actor must be a JSON string or object (a user or service id), not boolean',
                 'a batch names the spec whose actor is refused');
select throws_ok($$ select * from jobs.enqueue_batch('{"name": "act.bad", "actor": 7}', '{g,h}') $$,
                 'SJ023', null, 'enqueue_batch refuses it too');
select throws_ok($$ select * from jobs.stage('act.bad', 'i', '{}', '{"actor": 7}') $$,
                 'SJ023', null, 'stage refuses it too');
select throws_ok($$ select jobs.emit_event_v2('act.ev', '{}', '{"actor": 7}') $$,
                 'SJ023', null, 'emit_event_v2 refuses it too');
select is((select count(*)::int from jobs.job where name = 'act.bad')
          + (select count(*)::int from jobs.outbox where name = 'act.bad'), 0, 'nothing was written');

-- STEP_INVOKE: a child takes its parent's actor unless its spec names one
select lives_ok($$ select jobs.enqueue('act.parent', 'p', '{}', '{"queue": "q_actp", "actor": {"user": "7"}}') $$,
                'setup: a parent with an actor');
create temp table c1 as select id, claim from jobs.claim_v2('{q_actp}', 'w', 1, 30);
select lives_ok($$ select * from jobs.step_invoke((select id from c1), (select claim from c1), '{a,b}',
                    '[{"name": "act.child", "queue": "q_actc"},
                      {"name": "act.child", "queue": "q_actc", "actor": "service:billing"}]') $$,
                'the parent invokes two children');
select results_eq($$ select parent_step, actor from jobs.job_view where name = 'act.child' order by parent_step $$,
                  $$ values ('a', '{"user": "7"}'::jsonb), ('b', '"service:billing"'::jsonb) $$,
                  'child a inherits the parent''s actor; child b keeps the one its spec names');

-- IN-RUN WRITES: after jobs.fence_run, enqueues, stages and events take the run's actor
select lives_ok($$ select jobs.enqueue('act.run', 'r', '{}', '{"queue": "q_actr", "actor": "user:9"}') $$,
                'setup: a job with an actor');
create temp table c2 as select id, claim from jobs.claim_v2('{q_actr}', 'w', 1, 30);
select jobs.fence_run((select id from c2), (select claim from c2));
select lives_ok($$ select * from jobs.enqueue_many('[{"name": "act.follow", "key": "1"},
                                                     {"name": "act.follow", "key": "2", "actor": "user:other"}]');
                   select * from jobs.enqueue_batch('{"name": "act.follow"}', '{3}');
                   select * from jobs.stage('act.follow', '4', '{}', '{}');
                   select jobs.emit_event('act.ev', '{"n": 1}') $$,
                'the run enqueues, stages and emits');
select results_eq($$ select key, actor from jobs.job_view where name = 'act.follow' order by key $$,
                  $$ values ('1', '"user:9"'::jsonb), ('2', '"user:other"'::jsonb), ('3', '"user:9"'::jsonb) $$,
                  'its enqueues take the run''s actor (an explicit one wins)');
select results_eq($$ select (select spec->'actor' from jobs.outbox where name = 'act.follow' and key = '4'),
                            (select actor from jobs.event where name = 'act.ev') $$,
                  $$ values ('"user:9"'::jsonb, '"user:9"'::jsonb) $$,
                  'its staged job and its event carry the run''s actor');

-- GRANTS, logged in as the roles: claim_v2 is a worker's, emit_event_v2 a producer's
-- and a worker's; a producer cannot claim, a reader can do neither
create role act_producer login in role sqljobs_producer;
create role act_worker login in role sqljobs_worker;
create role act_reader login in role sqljobs_reader;
reset jobs.fake_now;  -- (the test clock is the owner's: these roles may not set it)
set local session authorization act_worker;
select lives_ok($$ select * from jobs.claim_v2('{q_act_none}', 'w-act', 1, 30) $$,
                'a worker login claims through claim_v2');
set local session authorization act_producer;
select throws_ok($$ select * from jobs.claim_v2('{q_act_none}', 'w-act', 1, 30) $$, '42501', null,
                 'a producer login cannot call claim_v2');
select lives_ok($$ select jobs.emit_event_v2('act.ev2', '{}', '{"actor": "svc:billing"}') $$,
                'a producer login emits with an actor');
set local session authorization act_reader;
select throws_ok($$ select jobs.emit_event_v2('act.ev2', '{}', '{}') $$, '42501', null,
                 'a reader login cannot emit');
reset session authorization;

select * from finish();
rollback;
