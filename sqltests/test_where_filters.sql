-- The *_where bulk verbs' filter: {"queue", "name", "state", "tenant"}, each a string or
-- an array of strings, all given fields must match (AND), an absent field matches
-- everything. Unknown fields, wrong types, unknown state names and max outside
-- 1..10000 are refused with invalid_argument (SJ001), changing nothing.
begin;
select plan(30);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
create schema jobs_test;
-- Dry run: the number a verb call reports as moved, with every change rolled back.
-- (A plpgsql variable keeps its value when the block's exception undoes the writes.)
create function jobs_test.moved(p_verb text, p_filter jsonb) returns integer language plpgsql as $$
declare v_moved integer;
begin
  begin
    execute pg_catalog.format('select moved from jobs.%I($1)', p_verb) into v_moved using p_filter;
    raise exception using errcode = 'P0001', message = 'dry run';
  exception when raise_exception then
    return v_moved;
  end;
end $$;
-- The filter plus a name restriction to this file's jobs.
create function jobs_test.f(p_filter jsonb) returns jsonb language sql as $$
  select '{"name": ["where.a", "where.b"]}'::jsonb || p_filter
$$;

do $$ begin
  perform jobs.enqueue_many('[
    {"name": "where.a", "key": "1", "queue": "q_w1", "tenant": "t1"},
    {"name": "where.a", "key": "2", "queue": "q_w1", "tenant": "t1"},
    {"name": "where.b", "key": "3", "queue": "q_w1", "tenant": "t2"},
    {"name": "where.a", "key": "4", "queue": "q_w2"},
    {"name": "where.b", "key": "5", "queue": "q_w2p", "tenant": "t1"},
    {"name": "where.a", "key": "6", "queue": "q_w2s", "tenant": "t2"}
  ]');
  perform jobs.nack(c.id, c.claim, null, 'park') from jobs.claim('{q_w2p}', 'w', 1, 30) c;
  perform jobs.ack(c.id, c.claim) from jobs.claim('{q_w2s}', 'w', 1, 30) c;
end $$;
-- live: 1, 2, 3, 4 ready; 5 parked. finished: 6 succeeded.

-- ---------------------------------------------------------------- matching
select is(jobs_test.moved('cancel_where', jobs_test.f('{}')), 5, 'no other field: every live job of those names');
select is(jobs_test.moved('cancel_where', '{"name": "where.a"}'), 3, 'name as a string');
select is(jobs_test.moved('cancel_where', '{"name": ["where.a", "where.b"]}'), 5, 'name as an array');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"queue": "q_w1"}')), 3, 'queue as a string');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"queue": ["q_w2", "q_w2p"]}')), 2, 'queue as an array');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"tenant": "t1"}')), 3, 'tenant as a string');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"tenant": ["t1", "t2"]}')), 4,
          'tenant as an array (a null tenant matches no tenant filter)');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"state": "parked"}')), 1, 'state as a string');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"state": ["ready", "parked"]}')), 5, 'state as an array');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"state": "succeeded"}')), 0,
          'a state the verb does not move from matches nothing');
select is(jobs_test.moved('remove_where', jobs_test.f('{"state": "succeeded"}')), 1,
          '...while a verb that moves it does');
select is(jobs_test.moved('cancel_where', '{"queue": "q_w1", "name": "where.a", "tenant": "t1", "state": "ready"}'), 2,
          'every field given must match (AND)');
select is(jobs_test.moved('cancel_where', '{"queue": "q_w2", "name": "where.b"}'), 0, 'AND: none match both');
select is(jobs_test.moved('cancel_where', jobs_test.f('{"queue": []}')), 0, 'an empty array matches nothing');

-- ---------------------------------------------------------------- refusals
create temp table before as
  select pg_catalog.string_agg(pg_catalog.concat_ws('/', key, state), ' ' order by key) as s
    from jobs.job where name in ('where.a', 'where.b');
select throws_ok($$ select * from jobs.cancel_where('{"colour": "red"}') $$, 'SJ001', null, 'an unknown field is refused');
select throws_ok($$ select * from jobs.cancel_where('{"queue": "q_w1", "priority": 0}') $$, 'SJ001', null,
                 'an unknown field beside known ones is refused');
select throws_ok($$ select * from jobs.cancel_where('[]') $$, 'SJ001', null, 'a filter that is not an object is refused');
select throws_ok($$ select * from jobs.cancel_where(null) $$, 'SJ001', null, 'a null filter is refused');
select throws_ok($$ select * from jobs.cancel_where('{"queue": 5}') $$, 'SJ001', null, 'a number is refused');
select throws_ok($$ select * from jobs.cancel_where('{"tenant": {"id": "t1"}}') $$, 'SJ001', null, 'an object is refused');
select throws_ok($$ select * from jobs.cancel_where('{"name": ["where.a", 1]}') $$, 'SJ001', null,
                 'an array holding a non-string is refused');
select throws_ok($$ select * from jobs.cancel_where('{"state": "sleeping"}') $$, 'SJ001', null, 'an unknown state is refused');
select throws_ok($$ select * from jobs.cancel_where('{"state": ["ready", "zombie"]}') $$, 'SJ001', null,
                 'an unknown state in an array is refused');
select throws_ok($$ select * from jobs.cancel_where('{}', 0) $$, 'SJ001', null, 'max 0 is refused');
select throws_ok($$ select * from jobs.cancel_where('{}', 10001) $$, 'SJ001', null, 'max 10001 is refused');
select throws_ok($$ select * from jobs.cancel_where('{}', null) $$, 'SJ001', null, 'a null max is refused');
select throws_ok($$ select * from jobs.requeue_where('{"colour": "red"}') $$, 'SJ001', null, 'requeue_where refuses it too');
select throws_ok($$ select * from jobs.promote_where('{"state": "sleeping"}') $$, 'SJ001', null, 'promote_where refuses it too');
select throws_ok($$ select * from jobs.remove_where('{"queue": 5}') $$, 'SJ001', null, 'remove_where refuses it too');
select is((select pg_catalog.string_agg(pg_catalog.concat_ws('/', key, state), ' ' order by key)
             from jobs.job where name in ('where.a', 'where.b')),
          (select s from before), 'the refused calls changed nothing');

select * from finish();
rollback;
