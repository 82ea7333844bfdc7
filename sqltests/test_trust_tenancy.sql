-- Trust boundary between tenants and between logins (sql/15_tenancy.sql,
-- sql/45_workers.sql, sql/10_errors.sql jobs.lock_keys, sql/20_enqueue.sql channel
-- tokens). A worker bound to acme is refused (SJ018) globex's job in heartbeat,
-- progress, ack_many and nack_many, and the fleet-wide limits() and job_types(); a
-- live worker row is renewed or removed only by the login that registered it (SJ020),
-- or removed by an operator; events and ordering keys lock rows of jobs.lock_key keyed
-- by tenant, never advisory locks; notifications carry tokens, not names or ids. Runs
-- on the real clock (the bound roles may not set jobs.fake_now).
begin;
select plan(32);

set local jobs.notify = off;
create role tbt_acme login in role sqljobs_worker, sqljobs_producer;
create role tbt_globex login in role sqljobs_worker, sqljobs_producer;
create role tbt_other login in role sqljobs_worker;
create role tbt_op login in role sqljobs_operator;
select ok(jobs.tenant_bind('tbt_acme', 'acme') and jobs.tenant_bind('tbt_globex', 'globex'),
          'setup: tbt_acme bound to acme, tbt_globex to globex');

-- globex's worker runs globex's job G; acme's worker runs acme's job A
set local session authorization tbt_globex;
do $$ begin
  perform pg_catalog.set_config('tbt.g', (select e.id from jobs.enqueue('tbt.job', 'g', '{}', '{"queue": "q_tbt"}') e)::text, true);
  perform pg_catalog.set_config('tbt.gc', (select c.claim from jobs.claim(array['q_tbt'], 'w-g', 1, 300) c)::text, true);
end $$;
set local session authorization tbt_acme;
do $$ begin
  perform pg_catalog.set_config('tbt.a', (select e.id from jobs.enqueue('tbt.job', 'a', '{}', '{"queue": "q_tbt"}') e)::text, true);
  perform pg_catalog.set_config('tbt.ac', (select c.claim from jobs.claim(array['q_tbt'], 'w-a', 1, 300) c)::text, true);
end $$;
reset session authorization;
select results_eq($$ select j.tenant, j.state::text, j.claim from jobs.job j where j.name = 'tbt.job' order by j.key $$,
                  $$ values ('acme', 'running', current_setting('tbt.ac')::bigint),
                            ('globex', 'running', current_setting('tbt.gc')::bigint) $$,
                  'setup: each tenant''s worker runs its own job');
create temp table before as select test.tables_digest() as d;

-- ---------------------------------------------------------------- another tenant's job: SJ018
set local session authorization tbt_acme;
select throws_ok($$ select jobs.heartbeat(current_setting('tbt.g')::bigint, current_setting('tbt.gc')::bigint, 30) $$,
                 'SJ018', null, 'acme''s worker: heartbeat of globex''s job is refused (not answered false)');
select throws_ok($$ select jobs.progress(current_setting('tbt.g')::bigint, current_setting('tbt.gc')::bigint, '{"p": 1}') $$,
                 'SJ018', null, 'acme''s worker: progress of globex''s job is refused');
select throws_ok($$ select * from jobs.ack_many(array[current_setting('tbt.g')::bigint], array[current_setting('tbt.gc')::bigint]) $$,
                 'SJ018', null, 'acme''s worker: ack_many of globex''s job is refused');
select throws_ok($$ select * from jobs.nack_many(array[current_setting('tbt.g')::bigint], array[current_setting('tbt.gc')::bigint]) $$,
                 'SJ018', null, 'acme''s worker: nack_many of globex''s job is refused');
select throws_ok($$ select * from jobs.heartbeat_many(array[current_setting('tbt.a')::bigint, current_setting('tbt.g')::bigint],
                                                     array[current_setting('tbt.ac')::bigint, current_setting('tbt.gc')::bigint], 30) $$,
                 'SJ018', null, 'acme''s worker: heartbeat_many naming its own job and globex''s is refused whole');
select throws_ok($$ select * from jobs.limits() $$, 'SJ018', null, 'a bound session: limits() is fleet-wide');
select throws_ok($$ select * from jobs.job_types() $$, 'SJ018', null, 'a bound session: job_types() is fleet-wide');
reset session authorization;
select is(test.tables_digest(), (select d from before), 'the refused calls changed no table');

-- ---------------------------------------------------------------- the worker registry
set local session authorization tbt_globex;
select lives_ok($$ select jobs.worker_heartbeat('tbt-w', array['q_tbt'], array['tbt.job'], 1, 300, 'host-g', 11, '{}') $$,
                'globex''s worker registers tbt-w');
reset session authorization;
select results_eq($$ select login, tenant, host, pid from jobs.worker where id = 'tbt-w' $$,
                  $$ values ('tbt_globex', 'globex', 'host-g', 11) $$,
                  'the row records the login that registered it and its tenant');
create temp table wrow as select w.* from jobs.worker w where w.id = 'tbt-w';
set local session authorization tbt_other;
select throws_ok($$ select jobs.worker_heartbeat('tbt-w', array['q_evil'], array['tbt.job'], 1, 300, 'host-x', 66, '{}') $$,
                 'SJ020', null, 'another login''s worker_heartbeat over the live row: worker_id_taken');
select throws_ok($$ select jobs.worker_stop('tbt-w') $$, 'SJ020', null,
                 'another (worker) login''s worker_stop of it: worker_id_taken');
reset session authorization;
select results_eq($$ select w.* from jobs.worker w where w.id = 'tbt-w' $$, $$ select * from wrow $$,
                  'the row is unchanged');
set local session authorization tbt_globex;
select lives_ok($$ select jobs.worker_heartbeat('tbt-w', array['q_tbt'], array['tbt.job'], 2, 300, 'host-g', 11, '{}') $$,
                'its own login renews it');
set local session authorization tbt_op;
select is(jobs.worker_stop('tbt-w'), true, 'an operator removes another login''s row');
reset session authorization;
select is((select count(*)::int from jobs.worker where id = 'tbt-w'), 0, 'it is gone');

-- ---------------------------------------------------------------- lock rows, not advisory locks
set local session authorization tbt_acme;
select lives_ok($$ select jobs.emit_event('tbt.paid', '{}') $$, 'acme emits tbt.paid');
select lives_ok($$ select * from jobs.step_wait(current_setting('tbt.a')::bigint, current_setting('tbt.ac')::bigint,
                                                'ship', '[{"event": "tbt.ship"}]') $$,
                'acme''s job waits for tbt.ship');
select lives_ok($$ select * from jobs.stage_many('[{"name": "tbt.out", "key": "o1", "ordering_key": "acct-9"}]') $$,
                'acme stages under ordering key acct-9');
reset session authorization;
select is((select pg_catalog.array_agg(k.key order by k.key) from jobs.lock_key k),
          array['event|acme|tbt.paid', 'event|acme|tbt.ship', 'event||tbt.ship', 'outbox|acme|acct-9'],
          'the emit, the wait and the stage took lock rows keyed by tenant (the wait also shares the untenanted name)');
-- the rows were made in this transaction: a set xmax is this transaction's row lock
select is((select pg_catalog.count(*)::int from jobs.lock_key k where k.xmax::text <> '0'), 4,
          'each is held locked to commit');
select ok(not exists (select from pg_catalog.pg_locks l
                       where l.locktype = 'advisory' and l.pid = pg_catalog.pg_backend_pid()),
          'and this backend holds no advisory lock');

-- ---------------------------------------------------------------- notification tokens
-- any session may LISTEN: jobs_wake and jobs_settled carry a token, the first 16 hex
-- digits of sha256(jobs.channel_key || 'queue:<name>' or 'job:<id>'), never the name
-- or the id (LISTEN itself cannot be observed inside a test that never commits)
set local session authorization tbt_acme;
create temp table wt as select * from jobs.wake_tokens(array['q_tbt', 'q_tbt_other', 'q_tbt']);
grant select on wt to public;
create temp table jt as select current_setting('tbt.a')::bigint as id,
                               jobs.watch_token(current_setting('tbt.a')::bigint) as token;
grant select, insert on jt to public;
select throws_ok($$ select jobs.watch_token(current_setting('tbt.g')::bigint) $$, 'SJ018', null,
                 'a bound session is refused the token of another tenant''s job');
select throws_ok($$ select jobs.channel_token('queue:q_tbt') $$, '42501', null,
                 'a worker cannot make tokens itself (channel_token is private)');
select throws_ok($$ select * from jobs.channel_key $$, '42501', null, 'nor read the key they are made from');
reset session authorization;
insert into jt values (current_setting('tbt.g')::bigint, jobs.watch_token(current_setting('tbt.g')::bigint));
select ok((select pg_catalog.count(*) = 3 and pg_catalog.bool_and(token ~ '^[0-9a-f]{16}$')
                  and pg_catalog.count(distinct token) = 2 and pg_catalog.bool_and(pg_catalog.strpos(token, queue) = 0)
             from wt),
          'wake_tokens: 16 hex digits per queue, one token per queue (two queues, two tokens), no queue name');
select is((select pg_catalog.count(*)::int from wt, jobs.channel_key k
            where wt.token = pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
                                k.key || pg_catalog.convert_to('queue:' || wt.queue, 'UTF8')), 'hex'), 16)), 3,
          'each is the keyed hash of its queue, what jobs.wake notifies');
select ok((select pg_catalog.count(*) = 2 and pg_catalog.bool_and(token ~ '^[0-9a-f]{16}$')
                  and pg_catalog.count(distinct token) = 2 and pg_catalog.bool_and(token <> id::text)
             from jt),
          'watch_token: 16 hex digits per job, one per job, not its id');
select is((select pg_catalog.count(*)::int from jt, jobs.channel_key k
            where jt.token = pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
                                k.key || pg_catalog.convert_to('job:' || jt.id, 'UTF8')), 'hex'), 16)), 2,
          'each is the keyed hash of its job, what jobs_settled carries');
select is((select pg_catalog.count(*)::int from jobs.channel_key k where pg_catalog.octet_length(k.key) = 32), 1,
          'the key: one row of 32 bytes, made at install');

select * from finish();
rollback;
