-- jobs.claim_v2 options.after, the claim cursor: per queue, only jobs at or after
-- (priority, run_at) in line, and every job of a better priority; claim_v2 answers each
-- job's run_at, the cursor to send next. What a cursor misses (a job put back behind
-- it) jobs.claimable_behind names (to a worker login only, within its tenant) and a
-- claim without one takes; a claim that recovers a job reads the heads. Limits make
-- it ignored; a malformed cursor is SJ001 and changes nothing.
begin;
select plan(31);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
do $$ begin
  -- q_cur: three jobs in line at 00:00 (priority 0) and one of priority 5; q_cur2: one
  perform jobs.enqueue('cur.job', k, '{}', '{"queue": "q_cur"}') from unnest('{a,b,c}'::text[]) k;
  perform jobs.enqueue('cur.job', 'low', '{}', '{"queue": "q_cur", "priority": 5}');
  perform jobs.enqueue('cur.job', 'other', '{}', '{"queue": "q_cur2"}');
end $$;
set local jobs.fake_now = '2030-01-01 00:00:10+00';
do $$ begin
  perform jobs.enqueue('cur.job', k, '{}', '{"queue": "q_cur"}') from unnest('{d,e}'::text[]) k;
end $$;
set local jobs.fake_now = '2030-01-01 00:01:00+00';

-- ANSWERED: claim_v2 answers each job's place in line
select results_eq(
  $$ select key, run_at from jobs.claim_v2('{q_cur}', 'w', 1, 30, '{"recover": false}') $$,
  $$ values ('a', '2030-01-01 00:00:00+00'::timestamptz) $$,
  'claim_v2 answers the run_at the job was in line at');

-- SEEK: a cursor at 00:00:05 skips b and c (behind it) and takes d, e, then low
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w', 2, 30,
       '{"recover": false, "after": {"q_cur": [0, "2030-01-01 00:00:05+00:00"]}}') $$,
  $$ values ('d'), ('e') $$,
  'a cursor takes the jobs at or after it in line, in line order');
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w', 5, 30,
       '{"recover": false, "after": {"q_cur": [0, "2030-01-01 00:00:10+00:00"]}}') $$,
  $$ values ('low') $$,
  'a worse priority is after every place of a better one');
select is((select count(*)::int from jobs.job where key in ('b', 'c') and state = 'ready'), 2,
          'the jobs behind the cursor were left ready');

-- AT: the cursor's own place is included (commit order is not run_at order)
set local jobs.fake_now = '2030-01-01 00:01:10+00';
do $$ begin
  perform jobs.enqueue('cur.job', 'tie', '{}', '{"queue": "q_cur", "run_at": "2030-01-01 00:00:10+00"}');
end $$;
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w', 5, 30,
       '{"recover": false, "after": {"q_cur": [0, "2030-01-01 00:00:10+00:00"]}}') $$,
  $$ values ('tie') $$,
  'a job at the cursor''s very place is taken');

-- BETTER PRIORITY: found from the head, whatever the cursor's run_at
do $$ begin
  perform jobs.enqueue('cur.job', 'urgent', '{}',
                       '{"queue": "q_cur", "priority": -3, "run_at": "2030-01-01 00:00:00+00"}');
end $$;
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w', 1, 30,
       '{"recover": false, "after": {"q_cur": [0, "2030-01-01 00:01:00+00:00"]}}') $$,
  $$ values ('urgent') $$,
  'a job of a better priority than the cursor''s is taken, though older than it');

-- PER QUEUE: a queue without a cursor is read from its head
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur,q_cur2}', 'w', 5, 30,
       '{"recover": false, "after": {"q_cur": [0, "2030-01-01 00:01:00+00:00"]}}') $$,
  $$ values ('other') $$,
  'the cursor is per queue: q_cur2 is read from its head');

-- BEHIND: jobs.claimable_behind names the queues whose cursor has b and c behind it
select is(jobs.claimable_behind('{q_cur,q_cur2}',
            '{"q_cur": [0, "2030-01-01 00:01:00+00:00"], "q_cur2": [0, "2030-01-01 00:01:00+00:00"]}'),
          '{q_cur}'::text[], 'claimable_behind names the queue with jobs behind its cursor');
select is(jobs.claimable_behind('{q_cur}', '{"q_cur": [0, "2030-01-01 00:00:00+00:00"]}'),
          '{}'::text[], 'nothing is behind a cursor at the head');
select is(jobs.claimable_behind('{q_cur}', '{"q_cur": [1, "2030-01-01 00:01:00+00:00"]}'),
          '{}'::text[], 'a better priority than the cursor''s is not behind it (the claim takes it)');
select is(jobs.claimable_behind('{q_cur}', '{"q_cur": [0, "2030-01-01 00:01:00+00:00"]}',
                                '{other.name}'),
          '{}'::text[], 'only jobs of the claimer''s names count');
select throws_ok($$ select jobs.claimable_behind('{q_cur}', null) $$, 'SJ001', null,
                 'claimable_behind refuses a missing cursor');
select throws_ok($$ select jobs.claimable_behind('{}', '{}') $$, 'SJ005', null,
                 'claimable_behind refuses no queue');

-- WITHOUT: a claim without a cursor takes what the cursors left behind
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w', 5, 30, '{"recover": false}') $$,
  $$ values ('b'), ('c') $$,
  'a claim without a cursor takes the jobs behind it');

-- RECOVERED: a claim whose RECOVER phase moves a job reads the heads, cursor or not
set local jobs.fake_now = '2030-01-01 00:10:00+00';  -- every lease above lapsed
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w2', 1, 30,
       '{"after": {"q_cur": [-3, "2030-01-01 00:09:00+00:00"]}}') $$,
  $$ values ('urgent') $$,
  'a claim that recovered lapsed leases takes the first of them, behind its cursor');
select is((select count(*)::int from jobs.claim_v2('{q_cur}', 'w2', 1000, 30, '{"recover": false}')), 7,
          'setup: the other recovered jobs claimed again');

-- LIMITS: with any limit defined, the cursor is ignored (a freed waiter is behind it)
do $$ begin
  perform jobs.enqueue('cur.job', 'limited', '{}', '{"queue": "q_cur", "run_at": "2030-01-01 00:00:00+00"}');
  perform jobs.limit_put('cur_any', '{"scope": "name", "target": "cur.other", "concurrency": 1}');
end $$;
select results_eq(
  $$ select key from jobs.claim_v2('{q_cur}', 'w', 5, 30,
       '{"recover": false, "after": {"q_cur": [0, "2030-01-01 00:01:00+00:00"]}}') $$,
  $$ values ('limited') $$,
  'with limits the cursor is ignored: the job behind it is claimed');

-- REFUSED, and nothing changes
do $$ begin
  perform jobs.enqueue('cur.job', 'untouched', '{}', '{"queue": "q_cur"}');
end $$;
select throws_ok($$ select from jobs.claim_v2('{q_cur}', 'w', 1, 30, '{"after": [0]}') $$,
                 'SJ001', null, 'options.after that is not an object is refused');
select throws_ok($$ select from jobs.claim_v2('{q_cur}', 'w', 1, 30,
                      '{"after": {"elsewhere": [0, "2030-01-01T00:00:00+00:00"]}}') $$,
                 'SJ001', null, 'a cursor for a queue the claim does not read is refused');
select throws_ok($$ select from jobs.claim_v2('{q_cur}', 'w', 1, 30,
                      '{"after": {"q_cur": [0.5, "2030-01-01T00:00:00+00:00"]}}') $$,
                 'SJ001', null, 'a fractional priority is refused');
select throws_ok($$ select from jobs.claim_v2('{q_cur}', 'w', 1, 30,
                      '{"after": {"q_cur": [40000, "2030-01-01T00:00:00+00:00"]}}') $$,
                 'SJ001', null, 'a priority outside smallint is refused');
select throws_ok($$ select from jobs.claim_v2('{q_cur}', 'w', 1, 30,
                      '{"after": {"q_cur": [0, "soon"]}}') $$,
                 'SJ001', 'sqljobs.invalid_argument: options.after of queue ''q_cur'' must be '
                          '[priority, "run_at"]: a whole priority and an ISO 8601 timestamp '
                          'with its offset (as claim_v2 answers run_at), got [0, "soon"]',
                 'a run_at that is not a timestamp is refused, naming the cursor');
select throws_ok($$ select from jobs.claim_v2('{q_cur}', 'w', 1, 30,
                      '{"after": {"q_cur": [0, "2030-01-01T00:00:00"]}}') $$,
                 'SJ001', null, 'a run_at without its offset is refused');
select is((select state::text from jobs.job where key = 'untouched'), 'ready',
          'a refused claim claimed nothing');
select throws_ok($$ select jobs.claimable_behind('{q_cur}', '{"q_cur": [0, "2030-01-01T00:00:00+00:00"]}',
                                                 null, '') $$,
                 'SJ001', null, 'claimable_behind refuses an empty version');

-- ROLES, logged in: a worker asks; a producer or a reader may not; a login bound to a
-- tenant learns nothing of another tenant's jobs, and its setting cannot widen that
do $$ begin
  perform jobs.enqueue('cur.job', 'globex', '{}',
                       '{"queue": "q_cur_t", "tenant": "globex", "run_at": "2030-01-01 00:00:00+00"}');
end $$;
set local jobs.fake_now = '';
create role cur_worker login in role sqljobs_worker;
create role cur_acme login in role sqljobs_worker;
create role cur_producer login in role sqljobs_producer;
create role cur_reader login in role sqljobs_reader;
select ok(jobs.tenant_bind('cur_acme', 'acme'), 'setup: cur_acme bound to acme');
set local session authorization cur_worker;
select is(jobs.claimable_behind('{q_cur_t}', '{"q_cur_t": [0, "2030-01-01T00:01:00+00:00"]}'),
          '{q_cur_t}'::text[], 'a worker login asks, and sees the job behind its cursor');
reset session authorization;
set local session authorization cur_acme;
select is(jobs.claimable_behind('{q_cur_t}', '{"q_cur_t": [0, "2030-01-01T00:01:00+00:00"]}'),
          '{}'::text[], 'a login bound to acme does not learn of globex''s job');
set local sqljobs.tenant = 'globex';
select throws_ok($$ select jobs.claimable_behind('{q_cur_t}', '{"q_cur_t": [0, "2030-01-01T00:01:00+00:00"]}') $$,
                 'SJ018', null, 'nor by setting sqljobs.tenant to globex');
reset sqljobs.tenant;
reset session authorization;
set local session authorization cur_producer;
select throws_ok($$ select jobs.claimable_behind('{q_cur_t}', '{}') $$, '42501', null,
                 'a producer login may not call claimable_behind');
reset session authorization;
set local session authorization cur_reader;
select throws_ok($$ select jobs.claimable_behind('{q_cur_t}', '{}') $$, '42501', null,
                 'nor may a reader login');
reset session authorization;

select * from finish();
rollback;
