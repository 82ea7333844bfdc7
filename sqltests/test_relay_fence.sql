-- jobs.relay: claims under a lease; a live lease keeps other relays off; a publish is
-- fenced on the relay id, so a relay whose lapsed lease was taken over publishes
-- nothing; the new holder's claim moves the fencing token and publishes once.
begin;
select plan(12);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.stage_many('[{"name": "rf.job", "key": "a"},
                   {"name": "rf.job", "key": "b"}, {"name": "rf.job", "key": "c"}]') $$,
                'setup: three staged rows');

select results_eq($$ select published, deduped, held from jobs.relay(2, 'A', 30) $$,
                  $$ values (0, 0, 2) $$, 'A claims a batch of two');
select results_eq($$ select key, claimed_by, claim, lease_expires_at from jobs.outbox
                      where claimed_by is not null order by id $$,
                  $$ values ('a', 'A', 1::bigint, '2030-01-01 00:00:30+00'::timestamptz),
                            ('b', 'A', 1::bigint, '2030-01-01 00:00:30+00'::timestamptz) $$,
                  'claimed_by, token 1 and the lease are set, in id order');
select results_eq($$ select published, held from jobs.relay(10, 'B', 30) $$,
                  $$ values (0, 1) $$, 'B gets only the row no live lease holds');

-- A dies; its lease lapses.
set local jobs.fake_now = '2030-01-01 00:00:31+00';
select results_eq($$ select published, held from jobs.relay(10, 'B', 30) $$,
                  $$ values (1, 2) $$, 'B publishes its row and takes over A''s lapsed batch');
select results_eq($$ select key, claimed_by, claim from jobs.outbox
                      where published_at is null order by id $$,
                  $$ values ('a', 'B', 2::bigint), ('b', 'B', 2::bigint) $$,
                  'the takeover moved the fencing token');
select results_eq($$ select published, held from jobs.relay(0, 'A', 30) $$,
                  $$ values (0, 0) $$, 'A comes back: its publish is fenced off, nothing changes');
select is((select count(*)::int from jobs.job), 1, 'still one job');
select results_eq($$ select published, deduped, held from jobs.relay(0, 'B', 30) $$,
                  $$ values (2, 0, 0) $$, 'B publishes the batch it took over');
select is((select count(*)::int from jobs.job), 3, 'three rows, three jobs');
select is((select count(*)::int from jobs.outbox o join jobs.job j on j.id = o.id
            where o.outcome = 'created' and o.job_id = o.id), 3,
          'each job has its staged row''s id');
select results_eq($$ select published, held from jobs.relay(10, 'B', 30) $$,
                  $$ values (0, 0) $$, 'nothing left to claim');

select * from finish();
rollback;
