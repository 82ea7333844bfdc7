"""Does the hot table stay healthy? A sustained enqueue + drain, sampled every 10 s.

    python -m bench.sustained                          # 3 minutes
    python -m bench.sustained --minutes 10

The production schema, as installed, in a fresh database sqljobs_bench_sustained_current:
finished rows stay in jobs.job; the claim reads only the partial index
job_claimable_idx (ready/interrupted rows). (docs/design/finished-jobs.md records the
history-table alternative this once ran beside; it was measured and retired.)

Load: one producer enqueues --rate jobs/s with enqueue_many in batches of --batch on a
fixed schedule; --workers processes loop claim(--limit) then ack_many, sleeping
--poll-s whenever a claim came back short. Every --sample-s the sampler records claim
latency (p50/p99 of the claim calls in that window, client side), throughput, backlog,
and jobs.job's heap and index sizes and dead tuples.

Vacuum: a server running with `autovacuum = off` (as the CI-configured one this was
written on) never cleans the table, so by default (--vacuum auto) the bench then
stands in for autovacuum: stock thresholds, checked every --naptime-s, throttled like
autovacuum (see Autovacuum). Server settings are left alone.

Retention: --retention-s S keeps succeeded jobs S seconds (the stored policy,
jobs.retention_put) and runs a purger process beside the load that calls one bounded
jobs.purge(--purge-batch) per --purge-every-s, as the scheduler's leader does; without
it finished rows stay for good. (The side-by-side sustained run beside the peers has the
same as its system `sqljobs_retention`: `python -m bench --part sustained --system
sqljobs_retention`.)

Writes bench/.out/sustained-current-<minutes>m-<vacuum><naptime>s[-retention<S>s].json
and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import db
from bench.adapters.sqljobs_sql import ACK_MANY, CLAIM, ENQUEUE_MANY, JOB_NAME, LEASE_S, QUEUES
from bench.autovacuum import Autovacuum

HERE = Path(__file__).resolve().parent
DESIGNS = ("current",)


def install(design: str, dsn: str) -> None:
    from sqljobs._schema.migrate import upgrade  # not in the load processes: they only import this

    upgrade(dsn)


# -- load ------------------------------------------------------------------------------


def producer(dsn: str, rate: float, batch: int, clock: Any, ready: Any, stop: Any,
             out: Any) -> None:
    run = uuid.uuid4().hex[:8]
    interval = batch / rate
    records: list[tuple[float, float, int]] = []  # (end, seconds, jobs)
    k = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.wait()
        t0 = clock.value
        while not stop.is_set():
            due = t0 + k * interval
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            specs = json.dumps([{"name": JOB_NAME, "key": f"{run}-{k}-{i}", "payload": {}}
                                for i in range(batch)])
            start = time.monotonic()
            conn.execute(ENQUEUE_MANY, (specs,), prepare=True).fetchall()
            end = time.monotonic()
            records.append((end - t0, end - start, batch))
            k += 1
    out.put(("producer", records))


def worker(dsn: str, name: str, limit: int, poll_s: float, clock: Any, ready: Any,
           stop: Any, out: Any) -> None:
    claims: list[tuple[float, float, int]] = []  # (end, seconds, jobs claimed)
    acks: list[tuple[float, float, int]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.wait()
        t0 = clock.value
        while not stop.is_set():
            start = time.monotonic()
            rows = conn.execute(CLAIM, (QUEUES, name, limit, LEASE_S), prepare=True).fetchall()
            end = time.monotonic()
            claims.append((end - t0, end - start, len(rows)))
            if rows:
                ids, tokens = [r[0] for r in rows], [r[1] for r in rows]
                start = time.monotonic()
                acked = conn.execute(ACK_MANY, (ids, tokens), prepare=True).fetchall()
                end = time.monotonic()
                if not all(r[1] for r in acked):
                    raise RuntimeError(f"{name}: ack_many lost a lease")
                acks.append((end - t0, end - start, len(acked)))
            if len(rows) < limit:
                time.sleep(poll_s)
    out.put(("worker", (claims, acks)))


def purger(dsn: str, every_s: float, batch: int, clock: Any, ready: Any, stop: Any,
           out: Any) -> None:
    """One bounded purge per tick; the next tick at once while rows remain eligible."""
    records: list[tuple[float, float, int]] = []  # (end, seconds, rows deleted)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.wait()
        t0 = clock.value
        while not stop.is_set():
            start = time.monotonic()
            row = conn.execute(PURGE, (batch,), prepare=True).fetchone()
            end = time.monotonic()
            deleted, remaining = (int(v or 0) for v in row) if row else (0, 0)
            records.append((end - t0, end - start, deleted))
            if remaining == 0:
                stop.wait(every_s)
    out.put(("purger", records))


PURGE = "select pg_catalog.sum(deleted), pg_catalog.sum(remaining) from jobs.purge(%s)"


# -- sampling --------------------------------------------------------------------------

SIZES = """
select pg_catalog.pg_relation_size('jobs.job') as job_heap,
       pg_catalog.pg_indexes_size('jobs.job') as job_indexes,
       pg_catalog.pg_relation_size('jobs.job_claimable_idx') as claimable_idx,
       pg_catalog.pg_relation_size('jobs.job_pkey') as pkey_idx,
       pg_catalog.pg_relation_size('jobs.job_key_idx') as key_idx
"""
TABLE_STATS = """
select n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd,
       autovacuum_count + vacuum_count, autoanalyze_count + analyze_count
  from pg_catalog.pg_stat_user_tables where schemaname = 'jobs' and relname = 'job'
"""
BACKLOG = "select count(*) from jobs.job where state in ('ready', 'interrupted')"


@dataclass
class Sample:
    t: float
    job_heap: int
    job_indexes: int
    claimable_idx: int
    pkey_idx: int
    key_idx: int
    n_live_tup: int
    n_dead_tup: int
    n_tup_upd: int
    n_tup_hot_upd: int
    vacuums: int
    analyzes: int
    backlog: int
    # Filled in from the load processes' records after the run:
    claim_p50_ms: float = 0.0
    claim_p99_ms: float = 0.0
    claim_calls: int = 0
    ack_p50_ms: float = 0.0
    ack_p99_ms: float = 0.0
    enqueue_p50_ms: float = 0.0
    enqueue_p99_ms: float = 0.0
    enqueued: int = 0
    acked: int = 0


def take_sample(conn: psycopg.Connection[Any], t: float) -> Sample:
    conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
    sizes = conn.execute(SIZES).fetchone()
    stats = conn.execute(TABLE_STATS).fetchone()
    backlog = conn.execute(BACKLOG).fetchone()
    assert sizes and stats and backlog
    return Sample(round(t, 1), *map(int, sizes), *map(int, stats), int(backlog[0]))


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


@dataclass
class Run:
    design: str
    minutes: float
    rate: float
    batch: int
    workers: int
    limit: int
    poll_s: float
    vacuum: str
    retention_s: float | None = None
    samples: list[Sample] = field(default_factory=list)
    vacuum_events: list[tuple[float, float, str]] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)


def run_design(design: str, args: argparse.Namespace) -> Run:
    dbname = f"sqljobs_bench_sustained_{design}"
    dsn = db.fresh_database(args.dsn, dbname)
    install(design, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select pg_catalog.current_setting('autovacuum')").fetchone()
    server_autovacuum = bool(row and row[0] == "on")
    vacuum = args.vacuum
    if vacuum == "auto":
        vacuum = "server" if server_autovacuum else "emulate"
    result = Run(design, args.minutes, args.rate, args.batch,
                 args.workers, args.limit, args.poll_s, vacuum, args.retention_s)
    retention = args.retention_s is not None
    if retention:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select jobs.retention_put('*', %s)",
                         (json.dumps({"succeeded": args.retention_s}),))
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    ready, clock = ctx.Barrier(args.workers + 2 + retention), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=producer,
                         args=(dsn, args.rate, args.batch, clock, ready, stop, out))]
    procs += [ctx.Process(target=worker, args=(dsn, f"w{i}", args.limit, args.poll_s, clock,
                                               ready, stop, out))
              for i in range(args.workers)]
    if retention:
        procs.append(ctx.Process(target=purger, args=(dsn, args.purge_every_s, args.purge_batch,
                                                      clock, ready, stop, out)))
    for p in procs:
        p.start()
    # Everyone starts on one clock, once every process is connected.
    t0 = clock.value = time.monotonic() + 0.2
    ready.wait(timeout=120)
    duration = args.minutes * 60
    autovacuum = Autovacuum(dsn, args.naptime_s, t0) if vacuum == "emulate" else None
    if autovacuum:
        autovacuum.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            n = 0
            while (due := t0 + (n + 1) * args.sample_s) <= t0 + duration + 1e-6:
                time.sleep(max(0.0, due - time.monotonic()))
                s = take_sample(conn, time.monotonic() - t0)
                result.samples.append(s)
                print(f"  {design} t={s.t:6.1f}s heap={s.job_heap / 2**20:7.1f}MiB "
                      f"idx={s.job_indexes / 2**20:7.1f}MiB dead={s.n_dead_tup:>8} "
                      f"backlog={s.backlog:>6} vacuums={s.vacuums}", flush=True)
                n += 1
    finally:
        stop.set()
        if autovacuum:
            autovacuum.stop.set()
            autovacuum.join()
            result.vacuum_events = autovacuum.events
    producer_records: list[tuple[float, float, int]] = []
    claim_records: list[tuple[float, float, int]] = []
    ack_records: list[tuple[float, float, int]] = []
    purge_records: list[tuple[float, float, int]] = []
    for _ in procs:
        kind, payload = out.get(timeout=120)
        if kind == "producer":
            producer_records = payload
        elif kind == "purger":
            purge_records = payload
        else:
            claim_records += payload[0]
            ack_records += payload[1]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"a load process exited with {p.exitcode}")

    lo = 0.0
    for s in result.samples:
        def window(recs: list[tuple[float, float, int]], lo: float = lo, hi: float = s.t) -> (
                list[tuple[float, float, int]]):
            return [r for r in recs if lo <= r[0] < hi]

        claims, acks, enq = window(claim_records), window(ack_records), window(producer_records)
        s.claim_p50_ms = pct([r[1] * 1e3 for r in claims], 0.50)
        s.claim_p99_ms = pct([r[1] * 1e3 for r in claims], 0.99)
        s.claim_calls = len(claims)
        s.ack_p50_ms = pct([r[1] * 1e3 for r in acks], 0.50)
        s.ack_p99_ms = pct([r[1] * 1e3 for r in acks], 0.99)
        s.enqueue_p50_ms = pct([r[1] * 1e3 for r in enq], 0.50)
        s.enqueue_p99_ms = pct([r[1] * 1e3 for r in enq], 0.99)
        s.enqueued = sum(r[2] for r in enq)
        s.acked = sum(r[2] for r in acks)
        lo = s.t

    with psycopg.connect(dsn, autocommit=True) as conn:
        live = conn.execute("select count(*) from jobs.job").fetchone()
    claim_ms = [r[1] * 1e3 for r in claim_records if r[0] <= duration]
    result.totals = {
        "enqueued": sum(r[2] for r in producer_records),
        "acked": sum(r[2] for r in ack_records),
        "claim_calls": len(claim_ms),
        "claim_p50_ms": pct(claim_ms, 0.50),
        "claim_p99_ms": pct(claim_ms, 0.99),
        "claim_nonempty_p50_ms": pct([r[1] * 1e3 for r in claim_records if r[2]], 0.50),
        "claim_nonempty_p99_ms": pct([r[1] * 1e3 for r in claim_records if r[2]], 0.99),
        "rows_in_job": int(live[0]) if live else 0,
        "purged": sum(r[2] for r in purge_records),
        "purge_calls": len(purge_records),
        "purge_p99_ms": pct([r[1] * 1e3 for r in purge_records if r[2]], 0.99),
    }
    if not args.keep:
        db.drop_database(args.dsn, dbname)
    return result


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def table(run: Run) -> str:
    lines = [
        f"### {run.design}: "
        f"{run.minutes:g} min, vacuum: {run.vacuum}, {run.rate:,.0f} jobs/s in batches of "
        f"{run.batch}, {run.workers} workers claiming {run.limit}"
        + ("" if run.retention_s is None else f", succeeded kept {run.retention_s:g} s")
        + "\n",
        "| t (s) | enq/s | ack/s | backlog | claim p50 / p99 (ms) | ack p50 / p99 (ms) "
        "| enqueue p50 / p99 (ms) | job heap (MiB) | job indexes (MiB) | claimable idx (MiB) "
        "| dead tuples | vacuums |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    prev = 0.0
    for s in run.samples:
        span = s.t - prev
        prev = s.t
        lines.append(
            f"| {s.t:.0f} | {s.enqueued / span:,.0f} | {s.acked / span:,.0f} | {s.backlog:,} "
            f"| {s.claim_p50_ms:.2f} / {s.claim_p99_ms:.2f} | {s.ack_p50_ms:.2f} / "
            f"{s.ack_p99_ms:.2f} | {s.enqueue_p50_ms:.2f} / {s.enqueue_p99_ms:.2f} "
            f"| {mib(s.job_heap)} | {mib(s.job_indexes)} | {mib(s.claimable_idx)} "
            f"| {s.n_dead_tup:,} | {s.vacuums} |")
    t = run.totals
    lines.append(
        f"\nTotals: enqueued {t['enqueued']:,}, acked {t['acked']:,}; claim p50 / p99 "
        f"{t['claim_p50_ms']:.2f} / {t['claim_p99_ms']:.2f} ms over {t['claim_calls']:,} calls "
        f"(claims that got jobs: {t['claim_nonempty_p50_ms']:.2f} / "
        f"{t['claim_nonempty_p99_ms']:.2f} ms); rows left in jobs.job {t['rows_in_job']:,}.")
    if run.retention_s is not None:
        lines.append(f"\nPurged {t['purged']:,} jobs in {t['purge_calls']:,} calls "
                     f"(p99 of a call that deleted rows: {t['purge_p99_ms']:.1f} ms).")
    if run.vacuum_events:
        lines.append("\nEmulated autovacuum: " + "; ".join(
            f"{what} at {at:.0f} s ({took:.1f} s)" for at, took, what in run.vacuum_events))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sustained", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="jobs/s enqueued")
    parser.add_argument("--batch", type=int, default=200, help="specs per enqueue_many")
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--limit", type=int, default=100, help="claim limit")
    parser.add_argument("--poll-s", type=float, default=0.05,
                        help="a worker's sleep after a short claim")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--dsn", default=db.admin_dsn_from_env())
    parser.add_argument("--vacuum", choices=["auto", "emulate", "server", "none"],
                        default="auto",
                        help="emulate: run stock autovacuum's thresholds from the bench; "
                             "auto (default): emulate when the server's autovacuum is off")
    parser.add_argument("--naptime-s", type=float, default=60.0,
                        help="the emulated autovacuum's naptime (stock: 60)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--retention-s", type=float, default=None,
                        help="keep succeeded jobs this long, purged beside the load "
                             "(default: no purge)")
    parser.add_argument("--purge-every-s", type=float, default=1.0,
                        help="with --retention-s: the purger's tick, seconds")
    parser.add_argument("--purge-batch", type=int, default=5000,
                        help="with --retention-s: rows one purge deletes at most")
    args = parser.parse_args(argv)

    designs = DESIGNS
    for design in designs:
        print(f"== {design}", flush=True)
        result = run_design(design, args)
        suffix = "" if args.retention_s is None else f"-retention{args.retention_s:g}s"
        out = HERE / ".out" / (f"sustained-{design}-{args.minutes:g}m-{result.vacuum}"
                               f"{args.naptime_s:g}s{suffix}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(asdict(result), indent=2) + "\n", encoding="utf-8")
        print(table(result), flush=True)
        claims = [s.claim_p99_ms for s in result.samples]
        if claims:
            print(f"median of the per-window claim p99: {statistics.median(claims):.2f} ms\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
