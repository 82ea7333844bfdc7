-- Trust boundary: poison values (docs/reference/sql.md, "Limits"; sql/10_errors.sql,
-- sql/20_enqueue.sql). No value a producer or a worker may pass breaks an index (54000),
-- a fleet-wide read or a worker reading it back: a run_at outside 1970..2200, a backoff
-- past 1e9 s, a JSON value nested 100 levels deep or more, a name, queue or key past its
-- bound are each refused at the door with invalid_argument (SJ001), and nothing is
-- written; the fleet-wide reads answer as before. Logged in as each role.
begin;
select plan(42);

create role tbx_producer login in role sqljobs_producer;
create role tbx_worker login in role sqljobs_worker;
set local jobs.notify = off;

-- a job tbx_worker runs
set local session authorization tbx_worker;
do $$ begin
  perform pg_catalog.set_config('tbx.id', (select e.id from jobs.enqueue('tbx.job', 'run', '{}', '{"queue": "q_tbx"}') e)::text, true);
  perform pg_catalog.set_config('tbx.claim', (select c.claim from jobs.claim(array['q_tbx'], 'w-x', 1, 300) c)::text, true);
  perform pg_catalog.set_config('tbx.deep', pg_catalog.repeat('{"a": ', 150) || '1' || pg_catalog.repeat('}', 150), true);
  perform pg_catalog.set_config('tbx.long', pg_catalog.repeat('n', 10000), true);
end $$;
reset session authorization;
select lives_ok($$ select jobs.stage('tbx.out', 'o1') $$, 'setup: a staged row for a relay to take');
create temp table before as select test.tables_digest() as d;

-- ---------------------------------------------------------------- run_at out of range, through every door
set local session authorization tbx_producer;
select throws_ok(pg_catalog.format(d.call, pg_catalog.jsonb_build_object('run_at', t.run_at)), 'SJ001', null,
                 'producer: run_at ' || t.run_at || ' through ' || d.door || ' is invalid_argument')
  from (values ('infinity'), ('-infinity'), ('200000-01-01')) t(run_at),
       (values ('enqueue', 'select * from jobs.enqueue(''tbx.job'', ''k'', ''{}'', %L)'),
               ('enqueue_many', 'select * from jobs.enqueue_many(jsonb_build_array(''{"name": "tbx.job", "key": "k"}''::jsonb || %L))'),
               ('enqueue_batch', 'select * from jobs.enqueue_batch(''{"name": "tbx.job"}''::jsonb || %L, array[''k1'', ''k2''], null)'),
               ('stage', 'select * from jobs.stage(''tbx.job'', ''k'', ''{}'', %L)')) d(door, call)
 order by d.door, t.run_at;
select throws_ok($$ select * from jobs.enqueue('tbx.job', 'k', '{}', '{"retry_base_s": 1e308, "retry_cap_s": 1e308}') $$,
                 'SJ001', null, 'producer: retry_base_s and retry_cap_s of 1e308 are refused');
select throws_ok($$ select * from jobs.enqueue('tbx.job', 'k', '{}', '{"retry_cap_s": 1e308}') $$,
                 'SJ001', null, 'producer: retry_cap_s of 1e308 alone is refused');

-- ---------------------------------------------------------------- nested 150 deep
select throws_ok($$ select * from jobs.enqueue('tbx.job', 'deep', current_setting('tbx.deep')::jsonb) $$,
                 'SJ001', null, 'producer: a payload nested 150 deep is refused');
select throws_ok($$ select jobs.emit_event('tbx.event', current_setting('tbx.deep')::jsonb) $$,
                 'SJ001', null, 'producer: an event payload nested 150 deep is refused');
set local session authorization tbx_worker;
select throws_ok($$ select jobs.ack(current_setting('tbx.id')::bigint, current_setting('tbx.claim')::bigint,
                                    current_setting('tbx.deep')::jsonb) $$,
                 'SJ001', null, 'worker: a result nested 150 deep is refused, under the live token');
select throws_ok($$ select * from jobs.ack_many(array[current_setting('tbx.id')::bigint], array[current_setting('tbx.claim')::bigint],
                                                array[current_setting('tbx.deep')::jsonb]) $$,
                 'SJ001', null, 'worker: through ack_many too');
select throws_ok($$ select jobs.progress(current_setting('tbx.id')::bigint, current_setting('tbx.claim')::bigint,
                                         current_setting('tbx.deep')::jsonb) $$,
                 'SJ001', null, 'worker: progress nested 150 deep is refused');
select throws_ok($$ select jobs.step_put(current_setting('tbx.id')::bigint, current_setting('tbx.claim')::bigint, 's',
                                         current_setting('tbx.deep')::jsonb) $$,
                 'SJ001', null, 'worker: a step value nested 150 deep is refused');
select throws_ok($$ select jobs.nack(current_setting('tbx.id')::bigint, current_setting('tbx.claim')::bigint,
                                     jsonb_build_object('kind', 'e', 'message', 'm', 'detail', current_setting('tbx.deep')::jsonb)) $$,
                 'SJ001', null, 'worker: an error nested 150 deep is refused');
select throws_ok($$ select jobs.emit_event('tbx.event', current_setting('tbx.deep')::jsonb) $$,
                 'SJ001', null, 'worker: an event payload nested 150 deep is refused');

-- ---------------------------------------------------------------- 10,000 bytes where at most 200 or 1000 go
set local session authorization tbx_producer;
select throws_ok($$ select * from jobs.enqueue(current_setting('tbx.long'), 'k') $$, 'SJ001', null,
                 'producer: a 10,000-byte name is invalid_argument (not 54000, index row too big)');
select throws_ok($$ select * from jobs.enqueue('tbx.job', 'k', '{}', jsonb_build_object('queue', current_setting('tbx.long'))) $$,
                 'SJ001', null, 'producer: a 10,000-byte queue is refused');
select throws_ok($$ select * from jobs.enqueue('tbx.job', current_setting('tbx.long')) $$, 'SJ001', null,
                 'producer: a 10,000-byte key is refused');
select throws_ok($$ select * from jobs.enqueue_batch('{"name": "tbx.job"}', array['k1', current_setting('tbx.long')], null) $$,
                 'SJ001', null, 'producer: a 10,000-byte key in enqueue_batch is refused');
select throws_ok($$ select * from jobs.stage('tbx.job', current_setting('tbx.long')) $$, 'SJ001', null,
                 'producer: a 10,000-byte key staged is refused');
select throws_ok($$ select * from jobs.stage('tbx.job', 'k', '{}', jsonb_build_object('ordering_key', current_setting('tbx.long'))) $$,
                 'SJ001', null, 'producer: a 10,000-byte ordering key is refused');
select throws_ok($$ select jobs.emit_event(current_setting('tbx.long'), '{}') $$, 'SJ001', null,
                 'producer: a 10,000-byte event name is refused');
set local session authorization tbx_worker;
select throws_ok($$ select jobs.step_put(current_setting('tbx.id')::bigint, current_setting('tbx.claim')::bigint,
                                         current_setting('tbx.long'), '1') $$,
                 'SJ001', null, 'worker: a 10,000-byte step name is refused');
select throws_ok($$ select jobs.lease_acquire(current_setting('tbx.long'), 'h', 30) $$, 'SJ001', null,
                 'worker: a 10,000-byte lease name is refused');
select throws_ok($$ select jobs.worker_heartbeat(current_setting('tbx.long'), array['q_tbx'], array['tbx.job'], 1, 30, 'h', 1, '{}') $$,
                 'SJ001', null, 'worker: a 10,000-byte worker id is refused');
select throws_ok($$ select jobs.worker_heartbeat('w-tbx', array['q_tbx', null], array['tbx.job'], 1, 30, 'h', 1, '{}') $$,
                 'SJ001', null, 'worker: a null queue in worker_heartbeat''s queues is refused (it broke declared_queues)');
select throws_ok($$ select jobs.worker_heartbeat('w-tbx', array[current_setting('tbx.long')], array['tbx.job'], 1, 30, 'h', 1, '{}') $$,
                 'SJ001', null, 'worker: a 10,000-byte queue in worker_heartbeat''s queues is refused');
select throws_ok($$ select jobs.worker_heartbeat('w-tbx', array['q_tbx'], array[null, 'tbx.job'], 1, 30, 'h', 1, '{}') $$,
                 'SJ001', null, 'worker: a null name in worker_heartbeat''s names is refused');
select throws_ok($$ select jobs.job_type_declare(current_setting('tbx.long'), '{}') $$, 'SJ017', null,
                 'worker: a 10,000-byte job type name is refused (invalid_job_type)');
-- Pins the relay id's bound: relay stores it in outbox.claimed_by, which an index
-- covers, so an unbounded id overflowed the index entry (a raw 54000). The text is
-- random (md5s) so that compression cannot shrink it under the entry's limit.
select throws_ok($$ select * from jobs.relay(10, (select pg_catalog.string_agg(pg_catalog.md5(i::text), '')
                                                   from pg_catalog.generate_series(1, 313) i), 30) $$,
                 'SJ001', null, 'worker: a 10,000-byte relay id is invalid_argument (not 54000)');

-- ---------------------------------------------------------------- nothing written; the fleet reads answer
reset session authorization;
select is(test.tables_digest(), (select d from before), 'no refused call changed any table of schema jobs');
select lives_ok($$ select * from jobs.queue_gauges() $$, 'jobs.queue_gauges() answers');
select lives_ok($$ select * from jobs.queue_stats_v2() $$, 'jobs.queue_stats_v2() answers');
select results_eq($$ select l.key, l.state::text from jobs.list_jobs('{}', null, 50) l $$,
                  $$ values ('run', 'running') $$, 'jobs.list_jobs(''{}'', null, 50) answers the one job there is');

select * from finish();
rollback;
