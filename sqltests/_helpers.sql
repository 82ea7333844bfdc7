-- Helpers the pgTAP files share, in schema `test` (tests/harness installs this file in
-- the database every sqltests/test_*.sql file runs on, next to pgTAP). A file's own
-- helpers go in a schema of its own (jobs_test), created and rolled back with it.

create schema if not exists test;

-- test.job(name, key): the job row of that name and key (null when none).
create or replace function test.job(p_name text, p_key text) returns jobs.job
language sql stable as $$
  select j from jobs.job j where j.name = p_name and j.key = p_key
$$;

-- test.jid(name, key): the job's id (null when none).
create or replace function test.jid(p_name text, p_key text) returns bigint
language sql stable as $$
  select j.id from jobs.job j where j.name = p_name and j.key = p_key
$$;

-- test.claim_of(name, key): the job's current claim token, the proof a fenced call
-- (ack, nack, heartbeat, step_put ...) must present: read from the table, as only the
-- worker that claimed it knows it.
create or replace function test.claim_of(p_name text, p_key text) returns bigint
language sql stable as $$
  select j.claim from jobs.job j where j.name = p_name and j.key = p_key
$$;

-- test.start(name, key, options, lease_s): enqueue the job into a queue of its own
-- (q_<name>_<key>, unless options name one) and claim it; answers its claim token.
create or replace function test.start(p_name text, p_key text, p_options jsonb default '{}',
                                      p_lease_s double precision default 30)
returns bigint
language plpgsql as $$
declare
  v_queue text := coalesce(p_options->>'queue', 'q_' || p_name || '_' || p_key);
  v_claim bigint;
begin
  perform jobs.enqueue(p_name, p_key, '{}', p_options || pg_catalog.jsonb_build_object('queue', v_queue));
  select c.claim into strict v_claim
    from jobs.claim(array[v_queue], 'w', 1, p_lease_s, pg_catalog.jsonb_build_object('names', array[p_name])) c;
  return v_claim;
end
$$;
