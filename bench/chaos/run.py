"""One chaos scenario: a fleet (workers, two schedulers, two relays) on a fresh database
of the suite's own cluster, a fault injected over and over while the jobs run, then the
checks, read from the side tables (bench/chaos/app.py)."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from bench.chaos.app import QUEUE, SIDE_TABLES
from bench.chaos.cluster import Cluster
from psycopg import sql
from psycopg.types.json import Jsonb

SCENARIOS = ("sigkill", "sigterm", "terminate", "restart", "idle_lock", "leader", "exhaust",
             "limits")
FINAL = ("succeeded", "failed", "dead", "cancelled")
LEASE_S = 2.0
POLL_S = 0.2
# exhaust: the server's connection slots, fewer than the fleet asks for: twice the
# workers (8 with the default profiles), each wanting a pool of 2 to 4 and a LISTEN
# connection plus up to 2 for the handlers' side tables, and the schedulers and relays
# theirs: about 50 to start, 70 at full use
EXHAUST_CONNECTIONS = 40
REPO = Path(__file__).resolve().parents[2]
# limits: the limits its jobs (chaos.limited) run under, written before the fleet starts.
# One hot group (the name), 8 account groups of 2, and each tenant on its own: the fleet's
# 32 slots are more than any of them lets run.
LIMITS: dict[str, dict[str, Any]] = {
    "chaos-limited": {"scope": "name", "target": "chaos.limited", "concurrency": 10},
    "chaos-acct": {"scope": "key", "target": "chaos.limited", "key": "acct", "concurrency": 2},
    "chaos-tenant": {"scope": "tenant", "concurrency": 3},
}
# limits: the tenants the fleet's last two workers are bound to (sqljobs.tenant); the
# jobs are spread over tenants t1-t4 and none (a fifth of them)
BOUND_TENANTS = ("t1", "t2")
# The fleet logs in as an ordinary role, as a platform's workers do: the harness, a
# superuser, then always finds one of the slots the server reserves for superusers,
# even while the exhaust scenario's fleet holds every other one.
FLEET_USER = "chaos_fleet"
FLEET_ROLE = f"""
do $$ begin
  if not exists (select from pg_roles where rolname = '{FLEET_USER}') then
    create role {FLEET_USER} login;
  end if;
end $$;
grant sqljobs_worker, sqljobs_operator, sqljobs_scheduler to {FLEET_USER};
grant select, insert, update, delete on all tables in schema public to {FLEET_USER};
-- the handlers' probe of re-executed steps reads what was stored (bench/chaos/app.py)
grant usage on schema jobs to {FLEET_USER};
grant select on jobs.step to {FLEET_USER};
"""


@dataclass
class Profile:
    name: str
    jobs: int          # across all scenarios
    kills: int         # SIGKILLs in the sigkill scenario (SIGTERMs in sigterm: a fifth)
    workers: int = 4
    concurrency: int = 8
    lock_hold_s: float = 10.0
    interval: tuple[float, float] = (0.5, 2.0)
    ms: int = 50       # sigkill and sigterm: a handler's (and a step's) sleep, so that the
                       # jobs keep the fleet busy while the signals come (others: 50)
    deadline_s: float = 1800.0  # per scenario; what is left then counts as lost


PROFILES = {
    "short": Profile("short", jobs=3000, kills=24, lock_hold_s=5.0, interval=(0.5, 1.0),
                     deadline_s=300.0),
    "medium": Profile("medium", jobs=20_000, kills=100),
    # 1,000 kills 0.5-2 s apart take 30 to 40 minutes: the sigkill scenario's 50,000 jobs
    # last about as long (about 1 s of handler time each on 32 slots)
    "full": Profile("full", jobs=100_000, kills=1000, lock_hold_s=60.0, ms=600,
                    deadline_s=4800.0),
}


class Fleet:
    """`sqljobs worker|scheduler|relay` processes on one database, logs under `logs`."""

    def __init__(self, dsn: str, logs: Path, profile: Profile) -> None:
        self.dsn, self.logs, self.profile = dsn, logs, profile
        self.workers: list[subprocess.Popen[bytes]] = []
        self.schedulers: list[subprocess.Popen[bytes]] = []
        self.relays: list[subprocess.Popen[bytes]] = []
        self.draining: list[subprocess.Popen[bytes]] = []  # SIGTERMed, waited for at stop
        self.tenant_of: dict[int, str | None] = {}  # worker pid -> its bound tenant
        self._n = 0

    def _spawn(self, *args: str, tenant: str | None = None) -> subprocess.Popen[bytes]:
        self._n += 1
        env = {**os.environ, "SQLJOBS_DSN": self.dsn}
        if tenant is not None:  # a tenant-bound worker: it claims its tenant's jobs only
            env["PGOPTIONS"] = f"-c sqljobs.tenant={tenant}"
        # the child keeps its own copy of the log's descriptor: ours closes at once
        with (self.logs / f"{self._n:04d}-{args[0]}.log").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-c", "from sqljobs._cli import main; main()", args[0],
                 "bench.chaos.app:app", *args[1:]], cwd=REPO, stdout=log,
                stderr=subprocess.STDOUT, env=env)

    def worker(self, tenant: str | None = None) -> subprocess.Popen[bytes]:
        p = self._spawn("worker", "--queue", QUEUE, "--concurrency", str(self.profile.concurrency),
                        "--lease", str(LEASE_S), "--poll-interval", str(POLL_S),
                        "--drain-timeout", "1", tenant=tenant)
        self.workers.append(p)
        self.tenant_of[p.pid] = tenant
        return p

    def scheduler(self) -> subprocess.Popen[bytes]:
        p = self._spawn("scheduler", "--lease", str(LEASE_S), "--tick", "0.2")
        self.schedulers.append(p)
        return p

    def relay(self) -> subprocess.Popen[bytes]:
        p = self._spawn("relay", "--lease", str(LEASE_S), "--poll-interval", str(POLL_S))
        self.relays.append(p)
        return p

    def restart_exited(self) -> int:
        """As a platform would: start again each worker, scheduler and relay that gave
        up (one that found no connection within its pool's timeout exits). Answers how
        many were started. (A relay left dead kept the outbox's jobs from ever existing.)"""
        started = 0
        for group, start in ((self.workers, self.worker), (self.schedulers, self.scheduler),
                             (self.relays, self.relay)):
            for gone in [p for p in group if p.poll() is not None]:
                group.remove(gone)
                start()
                started += 1
        return started

    def live(self, group: list[subprocess.Popen[bytes]]) -> list[subprocess.Popen[bytes]]:
        return [p for p in group if p.poll() is None]

    def stop(self) -> None:
        every = self.workers + self.schedulers + self.relays + self.draining
        for p in every:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in every:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


@dataclass
class Kill:
    pid: int
    at: datetime
    held: dict[int, int]  # job id -> the claim it ran under


@dataclass
class Outcome:
    scenario: str
    jobs: int
    staged: int
    faults: int = 0
    kills: list[Kill] = field(default_factory=list)
    restarts: int = 0  # processes started again after they exited on their own (exhaust)
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


def _scalar(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    return None if row is None else row[0]


def _connect(dsn: str, deadline_s: float = 60.0) -> psycopg.Connection[Any]:
    """A connection, waiting out a restart of the suite's server."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def database(scenario: str) -> str:
    return f"chaos_{scenario}"


def enqueue_jobs(conn: psycopg.Connection[Any], first: int, count: int, ms: int,
                 limited: bool = False) -> None:
    """Jobs `first` .. `first + count - 1`: plain (60 %), stepped with 3 steps (30 %),
    sagas (10 %, half of them failing to unwind). Every job retries within 2 s: a fault
    costs an attempt, not minutes of backoff. `limited` (the limits scenario): every job
    is chaos.limited instead, over 8 accounts (acct) and tenants t1-t4 or none."""
    if limited:
        conn.execute(
            "select count(*) from jobs.enqueue_many((select jsonb_agg(jsonb_build_object("
            "'name', 'chaos.limited', 'key', 'k' || i, 'queue', %s::text, "
            "'tenant', case when i %% 5 = 0 then null else 't' || (i %% 4 + 1) end, "
            "'max_attempts', 100, 'retry_base_s', 0.1, 'retry_cap_s', 2, "
            "'payload', jsonb_build_object('ms', %s::int, 'acct', 'a' || (i %% 8))) "
            "order by i) from generate_series(%s::int, %s::int) i))",
            (QUEUE, ms, first, first + count - 1))
        return
    conn.execute(
        "select count(*) from jobs.enqueue_many((select jsonb_agg(jsonb_build_object("
        "'name', case when i %% 10 < 6 then 'chaos.plain' "
        "  when i %% 10 < 9 then 'chaos.stepped' else 'chaos.saga' end, "
        "'key', 'k' || i, 'queue', %s::text, 'max_attempts', 100, 'retry_base_s', 0.1, "
        "'retry_cap_s', 2,"
        "'payload', jsonb_build_object('ms', %s::int, 'steps', 3, 'fail', i %% 20 = 9)) "
        "order by i) from generate_series(%s::int, %s::int) i))",
        (QUEUE, ms, first, first + count - 1))


def prepare(cluster: Cluster, scenario: str, jobs: int, ms: int) -> tuple[str, int]:
    """A fresh database with the schema, the side tables and the jobs (enqueue_jobs), and
    a tenth as many rows staged in the outbox (ordering keys over 8 accounts)."""
    from sqljobs._schema import migrate

    name = database(scenario)
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        ident = sql.Identifier(name)
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(ident))
        admin.execute(sql.SQL("create database {}").format(ident))
    dsn = cluster.dsn(name)
    migrate.upgrade(dsn)
    staged = max(jobs // 10, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLES)
        conn.execute(FLEET_ROLE)
        conn.execute("set jobs.notify = off")
        if scenario == "limits":
            for name, definition in LIMITS.items():
                conn.execute("select jobs.limit_put(%s, %s)", (name, Jsonb(definition)))
        enqueue_jobs(conn, 1, jobs, ms, limited=scenario == "limits")
        conn.execute(
            "select count(*) from jobs.stage_many((select jsonb_agg(jsonb_build_object("
            "'name', 'chaos.plain', 'key', 'o' || i, 'queue', %s::text, 'max_attempts', 100, "
            "'retry_base_s', 0.1, 'retry_cap_s', 2, "
            "'ordering_key', 'acct' || (i %% 8), 'payload', '{\"ms\": 5}'::jsonb) order by i)"
            " from generate_series(1, %s) i))", (QUEUE, staged))
    return dsn, staged


def _held_by(conn: psycopg.Connection[Any], pid: int) -> dict[int, int]:
    return dict(conn.execute(
        "select id, claim from jobs.job where state = 'running' "
        "and split_part(worker, ':', 2) = %s", (str(pid),)).fetchall())


def _live(conn: psycopg.Connection[Any]) -> int:
    return int(_scalar(conn, "select count(*) from jobs.job where name <> 'chaos.tick' "
                             "and state not in ('succeeded', 'failed', 'dead', 'cancelled')"))


def _done(conn: psycopg.Connection[Any], total: int) -> bool:
    left = _live(conn)
    unpublished = _scalar(conn, "select count(*) from jobs.outbox where published_at is null")
    made = _scalar(conn, "select count(*) from jobs.job where name <> 'chaos.tick'")
    return bool(left == 0 and unpublished == 0 and made == total)


def _signal_worker(conn: psycopg.Connection[Any], fleet: Fleet, how: signal.Signals,
                   outcome: Outcome) -> None:
    live = fleet.live(fleet.workers)
    if not live:
        fleet.worker()
        return
    # a worker that holds jobs (one still starting up proves nothing)
    holding = [p for p in live if _held_by(conn, p.pid)]
    victim = random.choice(holding or live)
    if how == signal.SIGKILL:
        # frozen, what it holds cannot change between the look and the kill
        victim.send_signal(signal.SIGSTOP)
        held = _held_by(conn, victim.pid)
        victim.kill()
        victim.wait(10)
        outcome.kills.append(Kill(victim.pid, _scalar(
            conn, "insert into public.chaos_kill (pid, at) values (%s, clock_timestamp()) "
                  "returning at", (victim.pid,)), held))
    else:
        victim.send_signal(signal.SIGTERM)  # a drain: it finishes or hands back its jobs
        fleet.draining.append(victim)
    fleet.workers.remove(victim)
    fleet.worker(fleet.tenant_of.get(victim.pid))  # a replacement bound as it was
    outcome.faults += 1


def _terminate_backends(conn: psycopg.Connection[Any], outcome: Outcome) -> None:
    """pg_terminate_backend on a few of the fleet's sessions (workers, schedulers, relays)."""
    killed = _scalar(conn, "select count(*) from (select pg_terminate_backend(pid) from "
                           "pg_stat_activity where datname = current_database() "
                           "and pid <> pg_backend_pid() and backend_type = 'client backend' "
                           "order by random() limit 3) t")
    outcome.faults += int(killed or 0)


def _kill_leaders(conn: psycopg.Connection[Any], fleet: Fleet, outcome: Outcome) -> None:
    """SIGKILL the scheduler holding the lease, and a relay; start replacements."""
    holder = _scalar(conn, "select holder from jobs.lease where name = 'scheduler'")
    for p in fleet.live(fleet.schedulers):
        if holder and str(p.pid) in holder:
            p.kill()
            p.wait(10)
            fleet.schedulers.remove(p)
            fleet.scheduler()
            outcome.faults += 1
    relays = fleet.live(fleet.relays)
    if relays:
        victim = random.choice(relays)
        victim.kill()
        victim.wait(10)
        fleet.relays.remove(victim)
        fleet.relay()
        outcome.faults += 1


def _hold_locks(dsn: str, hold_s: float, outcome: Outcome) -> threading.Thread:
    """A session idle in transaction holding row locks on 50 live jobs for hold_s."""
    def hold() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("select id from jobs.job where state in ('ready', 'running') "
                         "order by id limit 50 for update")
            time.sleep(hold_s)  # idle in transaction: the fault itself
            conn.rollback()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    outcome.faults += 1
    return thread


def run_scenario(cluster: Cluster, scenario: str, profile: Profile, jobs: int,
                 logs: Path, deadline_s: float) -> Outcome:
    killing = scenario in ("sigkill", "limits")  # SIGKILLs of workers that hold jobs
    dsn, staged = prepare(cluster, scenario, jobs,
                          profile.ms if scenario in ("sigkill", "sigterm") else 50)
    outcome = Outcome(scenario, jobs, staged)
    scenario_logs = logs / scenario
    scenario_logs.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(cluster.dsn(database(scenario), FLEET_USER), scenario_logs, profile)
    exhausting = scenario == "exhaust"
    refused_before = cluster.refused_connections()
    if exhausting:
        cluster.restart(max_connections=EXHAUST_CONNECTIONS)
    count = profile.workers * (2 if exhausting else 1)
    bound = BOUND_TENANTS if scenario == "limits" and count > len(BOUND_TENANTS) else ()
    for i in range(count):
        fleet.worker(bound[i - count + len(bound)] if i >= count - len(bound) else None)
    fleet.scheduler(), fleet.scheduler(), fleet.relay(), fleet.relay()
    planned = {"sigkill": profile.kills, "sigterm": max(profile.kills // 5, 1),
               "limits": max(profile.kills // 2, 1)}.get(scenario, 0)
    # The signals' scenarios last as long as their signals: while signals are left to
    # send, the queue is topped up so that the workers hold jobs when each one lands,
    # whatever the machine's speed (a fast one would finish the jobs first).
    top_up = profile.workers * profile.concurrency * 8
    ms = profile.ms if scenario in ("sigkill", "sigterm") else 50
    print(f"chaos {scenario}: {jobs} jobs" + (f", {planned} signals" if planned else ""),
          flush=True)
    started = time.monotonic()
    restarted = False
    lock_threads: list[threading.Thread] = []
    conn = _connect(dsn)  # the harness's one session (a superuser's slot is kept for it)
    try:
        # faults start once the fleet runs jobs
        while not _scalar(conn, "select count(*) > %s from public.chaos_exec",
                          (profile.concurrency,)):
            if time.monotonic() - started > 120:
                raise RuntimeError(f"the fleet never started: logs in {scenario_logs}")
            time.sleep(0.2)
        while time.monotonic() - started < deadline_s:
            try:
                signalled = len(outcome.kills) if killing else outcome.faults
                if signalled < planned and _live(conn) < top_up:
                    enqueue_jobs(conn, outcome.jobs + 1, top_up, ms, limited=scenario == "limits")
                    outcome.jobs += top_up
                if _done(conn, outcome.jobs + staged):
                    break
                pause = random.uniform(*profile.interval)
                if killing and len(outcome.kills) < planned:
                    _signal_worker(conn, fleet, signal.SIGKILL, outcome)
                elif scenario == "sigterm" and outcome.faults < planned:
                    _signal_worker(conn, fleet, signal.SIGTERM, outcome)
                elif scenario == "terminate":
                    _terminate_backends(conn, outcome)
                elif scenario == "restart" and not restarted and _scalar(
                        conn, "select count(*) > %s from jobs.job where state = 'succeeded'",
                        (jobs // 3,)):
                    conn.close()
                    cluster.restart()
                    restarted, outcome.faults = True, outcome.faults + 1
                    conn = _connect(dsn)
                elif scenario == "idle_lock" and not lock_threads:
                    lock_threads.append(_hold_locks(dsn, profile.lock_hold_s, outcome))
                elif scenario == "leader":
                    _kill_leaders(conn, fleet, outcome)
                elif scenario == "exhaust":
                    outcome.restarts += fleet.restart_exited()
                time.sleep(pause)
            except psycopg.OperationalError:
                conn.close()
                conn = _connect(dsn)
        outcome.seconds = time.monotonic() - started
    finally:
        conn.close()
        fleet.stop()
        for thread in lock_threads:
            thread.join(profile.lock_hold_s + 5)
        if exhausting:
            outcome.faults = cluster.refused_connections() - refused_before
            cluster.restart(max_connections=Cluster.MAX_CONNECTIONS)
    with _connect(dsn) as check:
        outcome.figures = checks(check, outcome)
    outcome.figures["permission_denied"] = permission_denied(scenario_logs)
    return outcome


def permission_denied(logs: Path) -> int:
    """Lines of the fleet's logs where the server refused its role a function: a part of
    the fleet that cannot do its work leaves its checks nothing to find (a scheduler
    without sqljobs_scheduler fires no tick, and "no tick fired twice" holds vacuously)."""
    return sum(line.count("permission denied")
               for log in sorted(logs.glob("*.log"))
               for line in log.read_text(errors="replace").splitlines())


def checks(conn: psycopg.Connection[Any], outcome: Outcome) -> dict[str, Any]:
    q = lambda query, *params: _scalar(conn, query, params or None)  # noqa: E731
    states = dict(conn.execute("select state::text, count(*) from jobs.job "
                               "where name <> 'chaos.tick' group by 1").fetchall())
    lost = outcome.jobs + outcome.staged - sum(states.get(s, 0) for s in FINAL)
    figures: dict[str, Any] = {
        "jobs": outcome.jobs + outcome.staged,
        "faults": outcome.faults,
        "seconds": round(outcome.seconds, 1),
        "states": states,
        "lost": lost,
        "settled_twice": q("select count(*) from (select job_id from public.chaos_settled "
                           "group by job_id having count(*) > 1) t"),
        "steps_reexecuted": q("select count(*) from public.chaos_step_exec where reexecuted"),
        "step_bodies_run": q("select count(*) from public.chaos_step_exec"),
        "duplicate_executions": q("select coalesce(sum(n - 1), 0)::bigint from (select count(*) n "
                                  "from public.chaos_exec where kind <> 'tick' "
                                  "group by job_id) t"),
        "sagas_unwound": q("select count(*) from jobs.job where name = 'chaos.saga' "
                           "and state = 'failed' and last_error->>'compensated' = 'true'"),
        "sagas_failed": q("select count(*) from jobs.job where name = 'chaos.saga' "
                          "and state = 'failed'"),
        "outbox_rows": q("select count(*) from jobs.outbox"),
        "outbox_unpublished": q("select count(*) from jobs.outbox where published_at is null"),
        "outbox_relayed_twice": q("select count(*) from (select o.id from jobs.outbox o "
                                  "join jobs.job j on j.key = o.key and j.name = o.name "
                                  "group by o.id having count(*) > 1) t"),
        "outbox_without_job": q("select count(*) from jobs.outbox o where not exists "
                                "(select 1 from jobs.job j where j.id = o.job_id)"),
        "ticks_fired": q("select count(*) from jobs.job where name = 'chaos.tick'"),
        "ticks_fired_twice": q("select count(*) - count(distinct key) from jobs.job "
                               "where name = 'chaos.tick'"),
        "ticks_run_twice": q("select count(*) from (select job_id from public.chaos_exec "
                             "where kind = 'tick' group by job_id having count(*) > 1) t"),
    }
    delays, recoveries, lapses, waits = [], [], [], []
    for kill in outcome.kills:
        for job_id, claim in kill.held.items():
            rerun = q("select min(at) from public.chaos_exec where job_id = %s and claim > %s",
                      job_id, claim)
            if rerun is not None:
                delays.append((rerun - kill.at).total_seconds())
            elif q("select state::text from jobs.job where id = %s", job_id) not in FINAL:
                delays.append(float("inf"))
            # the engine's part alone: when jobs.recover took the lapsed lease back (the
            # attempt it closed records the lapse and, in its error, the recovery)
            taken = conn.execute(RECOVERED, (job_id, claim)).fetchone()
            if taken is not None:
                recoveries.append((taken[0] - kill.at).total_seconds())
                lapses.append((taken[0] - taken[1]).total_seconds())
                # and from when a worker that may recover it ran (one bound to another
                # tenant may not): the engine's part once the fleet could do it
                since = conn.execute(RECOVERABLE, (taken[1], job_id, taken[1])).fetchone()[0]
                if since is not None:
                    waits.append(max((taken[0] - since).total_seconds(), 0.0))
    figures["kills"] = len(outcome.kills)
    figures["worker_restarts"] = outcome.restarts
    figures["jobs_held_at_kills"] = sum(len(k.held) for k in outcome.kills)
    for key, values in (("recovery_s", delays), ("lease_recovered_s", recoveries),
                        ("lapse_to_recovery_s", lapses), ("recoverer_to_recovery_s", waits)):
        if values:
            figures[key] = _spread(values)
    if outcome.scenario == "limits":
        figures |= limit_figures(conn)
    return figures


# The peak of runs at once per limit group, from chaos_run: a run lasts from its recorded
# start to its recorded end, or to the SIGKILL of its process (chaos_kill; its slots
# are held longer, until recovery, so this end is never early), or, for a run neither
# ended nor killed (counted as runs_open), to the end of the scenario. Ends sort before
# starts at the same instant. The recorded interval lies inside the run's claim and ack.
PEAKS = """
with runs as (
  select r.acct, r.tenant, r.started_at as s,
         coalesce(r.ended_at,
                  (select min(k.at) from public.chaos_kill k
                    where k.pid = r.pid and k.at >= r.started_at),
                  'infinity') as e
    from public.chaos_run r
), grouped as (
  select 'chaos-limited' as lim, '' as grp, s, e from runs
  union all select 'chaos-acct', acct, s, e from runs
  union all select 'chaos-tenant', tenant, s, e from runs where tenant is not null
), edges as (
  select lim, grp, s as at, 1 as d from grouped
  union all select lim, grp, e, -1 from grouped
), level as (
  select lim, grp,
         sum(d) over (partition by lim, grp order by at, d rows unbounded preceding) as n
    from edges
)
select lim, grp, max(n)::int from level group by lim, grp order by lim, grp
"""


def _spread(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 2),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
            "p99": round(ordered[int(0.99 * (len(ordered) - 1))], 2),
            "max": round(ordered[-1], 2)}


# When lease recovery took back the attempt a killed worker held (job, claim): the time
# in the error jobs.recover recorded, and the lease's expiry it closed the attempt at.
RECOVERED = """
select (a->'error'->>'at')::timestamptz, (a->>'ended_at')::timestamptz
  from jobs.job j, jsonb_array_elements(j.attempts) a
 where j.id = %s and a->>'outcome' = 'lease_expired' and (a->>'claim')::bigint = %s::bigint >> 32
"""


# From when, at or after a lapsed lease's expiry, a worker that may recover the job was
# running: one not bound to another tenant, registered (jobs.worker.started_at) and not
# SIGKILLed before that moment. Null when none ever was.
RECOVERABLE = """
select greatest(%s::timestamptz, min(w.started_at))
  from jobs.worker w, jobs.job j
 where j.id = %s and (w.tenant is null or w.tenant = j.tenant)
   and not exists (select from public.chaos_kill k
                    where k.pid = w.pid and k.at <= %s::timestamptz)
"""


def limit_figures(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """No group ever ran more jobs at once than its limit (groups_over_limit must be 0);
    each limit's highest peak over its groups, and the runs counted."""
    peaks = conn.execute(PEAKS).fetchall()  # type: ignore[arg-type]
    over = [f"{lim}|{grp}: {n} > {LIMITS[lim]['concurrency']}" for lim, grp, n in peaks
            if n > LIMITS[lim]["concurrency"]]
    top: dict[str, int] = {}
    for lim, _, n in peaks:
        top[lim] = max(top.get(lim, 0), n)
    return {
        "limited_runs": _scalar(conn, "select count(*) from public.chaos_run"),
        "limited_runs_killed": _scalar(
            conn, "select count(*) from public.chaos_run r where r.ended_at is null and "
                  "exists (select from public.chaos_kill k where k.pid = r.pid)"),
        "runs_open": _scalar(
            conn, "select count(*) from public.chaos_run r where r.ended_at is null and "
                  "not exists (select from public.chaos_kill k where k.pid = r.pid)"),
        "limit_peaks": {lim: f"{top.get(lim, 0)}/{LIMITS[lim]['concurrency']}"
                        for lim in LIMITS},
        "groups_over_limit": len(over),
        "over_limit": over,
    }


def failures(figures: dict[str, Any]) -> list[str]:
    """What must be zero and is not."""
    must_be_zero = ("lost", "settled_twice", "steps_reexecuted", "outbox_unpublished",
                    "outbox_relayed_twice", "outbox_without_job", "ticks_fired_twice",
                    "groups_over_limit", "permission_denied")
    bad = [f"{name} = {figures[name]}" for name in must_be_zero if figures.get(name)]
    # every job has 100 attempts: one that ran out of them met an error, not a fault
    if figures.get("states", {}).get("dead"):
        bad.append(f"dead = {figures['states']['dead']} (attempts exhausted: see the logs)")
    return bad


def dump(outcomes: list[Outcome]) -> str:
    return json.dumps({o.scenario: o.figures for o in outcomes}, indent=2, default=str)
