-- A batch first tries a plain insert (jobs.batch_write: no unique-index probe ahead of
-- each row) and, when a key or a group has a job, runs the same insert with ON CONFLICT
-- DO NOTHING. Both ways answer and store the same; the plain try leaves nothing behind
-- when it falls back; a batch with a singleton or debounced row never tries it (the
-- deadlock it would risk: tests/test_races.py); at most 8 tries a transaction
-- (jobs.subtransaction_allowed), and a session's setting of the count only picks the way
-- its own batches take.
begin;
select plan(18);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;

-- The same four batches through enqueue_batch and enqueue_many, under `name`: new keys,
-- an existing key among new ones, a key repeated in the batch, a singleton's group.
create function jobs_test.batches(p_name text) returns table (batch int, ord int, outcome text)
language plpgsql as $$
begin
  return query select 1, b.ord, b.outcome from jobs.enqueue_batch(
    pg_catalog.jsonb_build_object('name', p_name), array['c', 'a', 'b']) b;
  return query select 2, b.ord, b.outcome from jobs.enqueue_batch(
    pg_catalog.jsonb_build_object('name', p_name), array['e', 'a', 'd']) b;
  return query select 3, m.ord, m.outcome from jobs.enqueue_many(pg_catalog.jsonb_build_array(
    pg_catalog.jsonb_build_object('name', p_name, 'key', 'f'),
    pg_catalog.jsonb_build_object('name', p_name, 'key', 'g'),
    pg_catalog.jsonb_build_object('name', p_name, 'key', 'f'))) m;
  return query select 4, b.ord, b.outcome from jobs.enqueue_batch(
    pg_catalog.jsonb_build_object('name', p_name || '.one', 'singleton', true), array['s1', 's2']) b;
end
$$;

-- ---------------------------------------------------------------- the count
select is(jobs.subtransaction_allowed(), true, 'the first batch of a transaction may try');
select is(pg_catalog.current_setting('jobs.subtransactions'), '1', 'and counts its try');
set local jobs.subtransactions = '7';
select is(jobs.subtransaction_allowed(), true, 'so may the eighth');
select is(jobs.subtransaction_allowed(), false, 'the ninth may not');
select is(pg_catalog.current_setting('jobs.subtransactions'), '8', 'a refusal counts nothing');
set local jobs.subtransactions = 'many';
select is(jobs.subtransaction_allowed(), false, 'a setting that is not a count: no try');
set local jobs.subtransactions = '-1';
select is(jobs.subtransaction_allowed(), false, 'nor a negative one');

-- ---------------------------------------------------------------- both ways, the same
set local jobs.subtransactions = '';  -- every batch below tries the plain insert
create temp table plain as select * from jobs_test.batches('pi.plain');
select is(pg_catalog.current_setting('jobs.subtransactions'), '3',
          'each batch tried the plain insert but the singleton one');
set local jobs.subtransactions = '8';  -- none does
create temp table skip as select * from jobs_test.batches('pi.skip');
select is(pg_catalog.current_setting('jobs.subtransactions'), '8', 'none tried it');

select results_eq($$ select batch, ord, outcome from plain order by batch, ord $$,
                  $$ values (1, 1, 'created'), (1, 2, 'created'), (1, 3, 'created'),
                            (2, 1, 'created'), (2, 2, 'deduped'), (2, 3, 'created'),
                            (3, 1, 'created'), (3, 2, 'created'), (3, 3, 'deduped'),
                            (4, 1, 'created'), (4, 2, 'deduped') $$,
                  'new keys are created; a key with a job, a repeated key and a live singleton dedupe');
select results_eq($$ select batch, ord, outcome from plain order by batch, ord $$,
                  $$ select batch, ord, outcome from skip order by batch, ord $$,
                  'the plain try answers what ON CONFLICT answers');
select results_eq($$ select pg_catalog.replace(name, 'pi.plain', ''), key, state::text, payload
                       from jobs.job where name like 'pi.plain%' order by 1, 2 $$,
                  $$ select pg_catalog.replace(name, 'pi.skip', ''), key, state::text, payload
                       from jobs.job where name like 'pi.skip%' order by 1, 2 $$,
                  'and stores the same jobs');
select is((select pg_catalog.count(*)::int from jobs.job where name = 'pi.plain'), 7,
          'a fallen-back try left no row behind (a, b, c, d, e, f, g)');

-- ---------------------------------------------------------------- the answers are the rows
set local jobs.subtransactions = '';
create temp table seq0 as select test.seq() as n;
create temp table ids1 as select b.ord, b.id from jobs.enqueue_batch('{"name": "pi.ids"}', array['y', 'x']) b;
select results_eq($$ select id from ids1 order by ord $$,
                  $$ values (test.jid('pi.ids', 'y')), (test.jid('pi.ids', 'x')) $$,
                  'a batch answered by its plain insert names each created job');
select is(test.seq() - (select n from seq0), 2::bigint,
          'and drew one id per job: its plain insert was not tried twice');
create temp table ids2 as
  select m.ord, m.id from jobs.enqueue_many('[{"name": "pi.ids", "key": "z"}, {"name": "pi.ids", "key": "x"}]') m;
select results_eq($$ select id from ids2 order by ord $$,
                  $$ values (test.jid('pi.ids', 'z')), (test.jid('pi.ids', 'x')) $$,
                  'a batch that fell back names the created job and the existing one');

-- ---------------------------------------------------------------- past the count
set local jobs.subtransactions = '';
do $$ begin
  for i in 1..12 loop
    perform jobs.enqueue_batch('{"name": "pi.many"}', array['k' || i, 'l' || i]);
  end loop;
end $$;
select is(pg_catalog.current_setting('jobs.subtransactions'), '8', 'twelve batches, eight tries');
select is((select pg_catalog.count(*)::int from jobs.job where name = 'pi.many'), 24,
          'every batch past the count wrote its jobs all the same');

select * from finish();
rollback;
