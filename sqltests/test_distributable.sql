-- What a distributed install (docs/design/citus.md, "What building it takes") needs of
-- the engine, pinned on every install so that no change takes it back: Citus refuses a
-- SQL-language function with parameters whose statements touch a distributed table
-- ("could not create distributed plan ... parameters in SQL functions"), so every
-- function that reads or writes the tables it distributes (job, step, event_wait,
-- slot) is PL/pgSQL; and a trigger on a distributed table runs on its shards, where
-- the rows it reads (another job, a limit's slots) are not, so those tables have none:
-- the settling functions do what triggers did, in statements of their own. And Citus
-- 13 cannot plan a subquery that selects no column from a distributed table ("a column
-- definition list is required for functions returning record": `exists (select from
-- jobs.job ...)`), so the engine's select at least one.
begin;
select plan(3);

select is_empty($$
  select p.oid::regprocedure::text
    from pg_catalog.pg_proc p
   where p.pronamespace = 'jobs'::regnamespace
     and p.prolang = (select l.oid from pg_catalog.pg_language l where l.lanname = 'sql')
     and p.pronargs > 0
     and p.prosrc ~ 'jobs\.(job|step|event_wait|slot)\M'
$$, 'no SQL-language function with parameters touches a table the distributed mode distributes');

select is_empty($$
  select t.tgrelid::regclass::text || ': ' || t.tgname
    from pg_catalog.pg_trigger t
   where t.tgrelid in ('jobs.job'::regclass, 'jobs.step'::regclass, 'jobs.event_wait'::regclass,
                       'jobs.slot'::regclass)
     and not t.tgisinternal
$$, 'no trigger on a table the distributed mode distributes');

select is_empty($$
  select p.oid::regprocedure::text
    from pg_catalog.pg_proc p
   where p.pronamespace = 'jobs'::regnamespace
     and p.prosrc ~* 'select\s+from\s+jobs\.(job|step|event_wait|slot)\M'
$$, 'no function selects no column from a table the distributed mode distributes');

select * from finish();
rollback;
