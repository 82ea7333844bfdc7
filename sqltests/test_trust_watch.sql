-- Trust boundary: jobs.watch_outcome(id) on a job the caller did not enqueue
-- (sql/40_settle.sql; docs/design/roles.md, "Watching a job's outcome").
-- The id is the handle: any job the caller may see (its tenant's when bound, every
-- job when unbound) may be watched, as a result waiter awaits a job another process
-- enqueued. What it answers is redacted as jobs.job_view is; what it writes is the
-- settle_watched flag alone (a NOTIFY of the job's keyed token at its settle, and the
-- finished row kept at least the awaited age), nothing a view shows.
-- A tenant-bound producer can neither read nor mark another tenant's job.
-- Logged in as an unbound producer and as a producer bound to tenant acme.
begin;
select plan(13);

create role tbwo_free login in role sqljobs_producer;   -- bound to nothing
create role tbwo_acme login in role sqljobs_producer;   -- bound to acme below
set local jobs.notify = off;

-- setup, as the superuser: a job type with a sensitive path; globex's job that
-- succeeded with a result repeating the secret (S), globex's ready job (G), acme's
-- ready job (A), an untenanted ready job (N)
select lives_ok($$ select jobs.job_type_put('tbwo.pay', '{"queue": "q_tbwo", "sensitive": ["card"]}') $$,
                'setup: a job type whose card is sensitive');
do $$ begin
  perform pg_catalog.set_config('tbwo.s', (select e.id from jobs.enqueue('tbwo.pay', 's',
    '{"card": "4111111111111111"}', '{"queue": "q_tbwo", "tenant": "globex"}') e)::text, true);
  perform jobs.ack(c.id, c.claim, '{"charged": "4111111111111111", "amount": 5}')
     from jobs.claim(array['q_tbwo'], 'w', 1, 30) c;
  perform pg_catalog.set_config('tbwo.g', (select e.id from jobs.enqueue('tbwo.pay', 'g',
    '{"card": "4111111111111111"}', '{"queue": "q_tbwo_g", "tenant": "globex"}') e)::text, true);
  perform pg_catalog.set_config('tbwo.a', (select e.id from jobs.enqueue('tbwo.pay', 'a',
    '{}', '{"queue": "q_tbwo_a", "tenant": "acme"}') e)::text, true);
  perform pg_catalog.set_config('tbwo.n', (select e.id from jobs.enqueue('tbwo.pay', 'n',
    '{}', '{"queue": "q_tbwo_n"}') e)::text, true);
end $$;
select ok(jobs.tenant_bind('tbwo_acme', 'acme'), 'setup: tbwo_acme is bound to acme');
-- each job's row without its settle_watched flag: what a watch may not change
create temp table rows_before as
  select j.id, j.settle_watched, pg_catalog.to_jsonb(j) - 'settle_watched' as rest from jobs.job j;
create temp table digest_before as select test.tables_digest() as d;

-- ---------------------------------------------------------------- an unbound producer
set local session authorization tbwo_free;
select results_eq($$ select state::text, result from jobs.watch_outcome(current_setting('tbwo.s')::bigint) $$,
                  $$ values ('succeeded', '{"charged": "[redacted]", "amount": 5}'::jsonb) $$,
                  'unbound producer: watch_outcome of a job it did not enqueue answers it redacted');
select results_eq($$ select state::text, result from jobs.watch_outcome(current_setting('tbwo.n')::bigint) $$,
                  $$ values ('ready', null::jsonb) $$,
                  'unbound producer: watch_outcome of a live job it did not enqueue answers its state');
select is_empty($$ select * from jobs.watch_outcome(-1) $$, 'unbound producer: no such job, no row');
reset session authorization;
select results_eq($$ select j.id, j.settle_watched from jobs.job j
                      where j.id <> all (select b.id from rows_before b where b.settle_watched)
                        and j.settle_watched order by j.id $$,
                  $$ values (current_setting('tbwo.n')::bigint, true) $$,
                  'the write: the live job is marked watched (the finished one is not), no other row');
select is_empty($$ select j.id from jobs.job j join rows_before b using (id)
                    where pg_catalog.to_jsonb(j) - 'settle_watched' <> b.rest $$,
                'and nothing but the flag changed on any job');
select is((select count(*)::int from jobs.job_view v where pg_catalog.to_jsonb(v) ? 'settle_watched'), 0,
          'the flag is in no view');
update jobs.job set settle_watched = false where id = current_setting('tbwo.n')::bigint;  -- (back)
select is(test.tables_digest(), (select d from digest_before), '(setup: back to the digest)');

-- ---------------------------------------------------------------- a producer bound to acme
set local session authorization tbwo_acme;
select throws_ok($$ select * from jobs.watch_outcome(current_setting('tbwo.g')::bigint) $$, 'SJ018', null,
                 'acme producer: watch_outcome of globex''s live job is tenant_refused');
select throws_ok($$ select * from jobs.watch_outcome(current_setting('tbwo.s')::bigint) $$, 'SJ018', null,
                 'acme producer: and of globex''s finished job (its result not answered, redacted or not)');
select results_eq($$ select state::text from jobs.watch_outcome(current_setting('tbwo.a')::bigint) $$,
                  $$ values ('ready') $$, 'acme producer: its own tenant''s job it watches');
reset session authorization;
-- (settings read first, in scalar subqueries: distributed on Citus, a query over the jobs
-- runs on a shard, where the setting does not exist)
select results_eq($$ select j.id, j.settle_watched from jobs.job j
                      where j.id in ((select current_setting('tbwo.g')::bigint),
                                     (select current_setting('tbwo.s')::bigint),
                                     (select current_setting('tbwo.a')::bigint))
                      order by j.id $$,
                  $$ values (current_setting('tbwo.s')::bigint, false), (current_setting('tbwo.g')::bigint, false),
                            (current_setting('tbwo.a')::bigint, true) $$,
                  'globex''s jobs are not marked watched (settle_watched as before); acme''s own is');

select * from finish();
rollback;
