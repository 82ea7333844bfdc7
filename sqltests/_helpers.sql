-- Helpers the pgTAP files share, in schema `test` (tests/harness installs this file in
-- the database every sqltests/test_*.sql file runs on, next to pgTAP). A file's own
-- helpers go in a schema of its own (jobs_test), created and rolled back with it.
-- Those with parameters that read jobs.job are PL/pgSQL: Citus plans no SQL function
-- with parameters over a distributed table (bench/citus_probe.py).

create schema if not exists test;

-- test.job(name, key): the job row of that name and key (null when none).
create or replace function test.job(p_name text, p_key text) returns jobs.job
language plpgsql stable as $$
begin
  return (select j from jobs.job j where j.name = p_name and j.key = p_key);
end
$$;

-- test.jid(name, key): the job's id (null when none).
create or replace function test.jid(p_name text, p_key text) returns bigint
language plpgsql stable as $$
begin
  return (select j.id from jobs.job j where j.name = p_name and j.key = p_key);
end
$$;

-- test.claim_of(name, key): the job's current claim token, the proof a fenced call
-- (ack, nack, heartbeat, step_put ...) must present: read from the table, as only the
-- worker that claimed it knows it.
create or replace function test.claim_of(p_name text, p_key text) returns bigint
language plpgsql stable as $$
begin
  return (select j.claim from jobs.job j where j.name = p_name and j.key = p_key);
end
$$;

-- test.start(name, key, options, lease_s, worker): enqueue the job into a queue of its
-- own (q_<name>_<key>, unless options name one) and claim it as the worker (default
-- 'w'); answers its claim token.
create or replace function test.start(p_name text, p_key text, p_options jsonb default '{}',
                                      p_lease_s double precision default 30,
                                      p_worker text default 'w')
returns bigint
language plpgsql as $$
declare
  v_queue text := coalesce(p_options->>'queue', 'q_' || p_name || '_' || p_key);
  v_claim bigint;
begin
  perform jobs.enqueue(p_name, p_key, '{}', p_options || pg_catalog.jsonb_build_object('queue', v_queue));
  select c.claim into strict v_claim
    from jobs.claim(array[v_queue], p_worker, 1, p_lease_s, pg_catalog.jsonb_build_object('names', array[p_name])) c;
  return v_claim;
end
$$;

-- test.claim_one(queue, worker, lease_s, options): claim the next job of the queue
-- (exactly one must be there); answers its claim token.
create or replace function test.claim_one(p_queue text, p_worker text default 'w',
                                          p_lease_s double precision default 30,
                                          p_options jsonb default '{}')
returns bigint
language plpgsql as $$
declare
  v_claim bigint;
begin
  select c.claim into strict v_claim
    from jobs.claim(array[p_queue], p_worker, 1, p_lease_s, p_options) c;
  return v_claim;
end
$$;

-- test.error_of(sql): 'SQLSTATE message' of the error the statement raises (null when
-- it raises none).
create or replace function test.error_of(p_sql text) returns text
language plpgsql as $$
begin
  execute p_sql;
  return null;
exception when others then
  return sqlstate || ' ' || sqlerrm;
end
$$;

-- test.error_text(sql): everything the statement's error tells its caller (SQLSTATE,
-- message, detail, hint), to show what an error does not print (null when none).
create or replace function test.error_text(p_sql text) returns text
language plpgsql as $$
declare
  v_message text;
  v_detail  text;
  v_hint    text;
begin
  execute p_sql;
  return null;
exception when others then
  get stacked diagnostics v_message = message_text, v_detail = pg_exception_detail,
                          v_hint = pg_exception_hint;
  return pg_catalog.concat_ws(' | ', sqlstate, v_message, v_detail, v_hint);
end
$$;

-- test.seq(): the last id drawn from jobs.job_id_seq (a refused call draws none).
create or replace function test.seq() returns bigint
language sql stable as $$
  select s.last_value from jobs.job_id_seq s
$$;

-- test.tables_digest(): one md5 over the rows of every table of schema jobs, read as
-- the caller (the superuser): equal before and after a call that changed nothing.
create or replace function test.tables_digest() returns text
language plpgsql as $$
declare
  v_table regclass;
  v_rows  text;
  v_all   text := '';
begin
  for v_table in
    select c.oid::regclass from pg_catalog.pg_class c
     where c.relnamespace = 'jobs'::regnamespace and c.relkind in ('r', 'p')
     order by c.relname
  loop
    execute pg_catalog.format('select pg_catalog.string_agg(t::text, %L order by t::text) from %s t',
                              chr(10), v_table) into v_rows;
    v_all := v_all || v_table::text || ':' || coalesce(pg_catalog.md5(v_rows), '-') || ' ';
  end loop;
  return pg_catalog.md5(v_all);
end
$$;

-- test.take(queue, name): claim the one job of that name in the queue; answers its id
-- and claim token (no row when none is claimable).
create or replace function test.take(p_queue text, p_name text)
returns table (id bigint, claim bigint)
language sql as $$
  select c.id, c.claim from jobs.claim(array[p_queue], 'w', 1, 30,
                                       pg_catalog.jsonb_build_object('names', array[p_name])) c
$$;

-- test.finish(name, key, options, outcome, lease_s, at): enqueue the job (into a queue
-- of its own, q_<name>_<key>, unless options name one; max_attempts 1 unless options
-- say otherwise) and take it to outcome now (or at `at`, which sets jobs.fake_now for
-- the rest of the transaction): ready (enqueued only), cancelled, running, succeeded,
-- failed, dead (its one attempt fails), parked or interrupted. Answers its id.
create or replace function test.finish(p_name text, p_key text, p_options jsonb, p_outcome text,
                                       p_lease_s double precision default 3600,
                                       p_at timestamptz default null)
returns bigint
language plpgsql as $$
declare
  v_queue text := coalesce(p_options->>'queue', 'q_' || p_name || '_' || p_key);
  v_id    bigint;
  v_claim bigint;
begin
  if p_at is not null then
    perform pg_catalog.set_config('jobs.fake_now', p_at::text, true);
  end if;
  if p_outcome not in ('ready', 'cancelled', 'running', 'succeeded', 'failed', 'dead', 'parked',
                       'interrupted') then
    raise exception 'test.finish: unknown outcome %', p_outcome;
  end if;
  select e.id into strict v_id
    from jobs.enqueue(p_name, p_key, '{}', '{"max_attempts": 1}'::jsonb || p_options
                                           || pg_catalog.jsonb_build_object('queue', v_queue)) e;
  if p_outcome = 'ready' then
    return v_id;
  elsif p_outcome = 'cancelled' then
    perform jobs.cancel(v_id);
    return v_id;
  end if;
  select c.claim into v_claim
    from jobs.claim(array[v_queue], 'w', 1, p_lease_s, pg_catalog.jsonb_build_object('names', array[p_name])) c
   where c.id = v_id;
  if v_claim is null then
    raise exception 'test.finish: %/% was not claimed', p_name, p_key;
  end if;
  case p_outcome
    when 'succeeded' then perform jobs.ack(v_id, v_claim);
    when 'failed' then perform jobs.nack(v_id, v_claim, '{"m": "x"}', 'fail');
    when 'dead' then perform jobs.nack(v_id, v_claim, '{"m": "x"}', 'retry');
    when 'parked' then perform jobs.nack(v_id, v_claim, null, 'park');
    when 'interrupted' then perform jobs.nack(v_id, v_claim, null, 'interrupt');
    else null;  -- running: left running
  end case;
  if (select j.state::text from jobs.job j where j.id = v_id) <> p_outcome then
    raise exception 'test.finish: %/% is % (not %)', p_name, p_key,
      (select j.state from jobs.job j where j.id = v_id), p_outcome;
  end if;
  return v_id;
end
$$;
