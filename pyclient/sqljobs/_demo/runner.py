"""Run the demo: enqueue the example jobs, serve them with a real worker and scheduler
in this process, watch the queues until every job is final, then tell what happened.

    $ sqljobs demo                 # on the embedded PostgreSQL
    $ sqljobs demo --dsn postgresql://...

The worker and the scheduler are the ones `sqljobs worker --with-scheduler` runs
(`sqljobs.worker.Worker`, `sqljobs.scheduler.Scheduler`), run together by
`sqljobs._runtime.roles.run_roles_async` beside a third role, the `Monitor`: it reads
`jobs.queue_stats()` and the demo's jobs a few times a second, emits the payment events
the order sagas wait for, pauses the cron schedule once it fired a few times, and ends
the run (the other roles then drain and stop) when every job of this run is final or the
time limit passes. Keys carry a per-run id, so the demo can run again on the same
database; its jobs stay there afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from rich.console import Console

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import ScheduleNotFound
from sqljobs._demo.display import Display, make_display, subtract
from sqljobs._demo.jobs import HEARTBEAT, PAYMENT_EVENT, DemoJobs, build_app
from sqljobs._demo.summary import JobRow, Report, render
from sqljobs._runtime.roles import run_roles_async
from sqljobs._runtime.scheduler import Scheduler
from sqljobs._runtime.worker import Worker

QUEUES = ("demo-mail", "demo-crm", "demo-orders", "demo-cron", "demo-media")
HEARTBEATS = 3  # the cron task fires this many times, then the demo pauses it
POLL_S = 0.25
EMIT_FALLBACK_S = 15.0  # emit an order's payment event by then even if no wait was seen

_ROWS = (
    "select id, name, queue, key, state::text as state, attempt, max_attempts, last_error, "
    "result, nullif(run_at, 'infinity') as run_at, created_at "
    "from jobs.job_view where name like 'demo.%%' and id >= %s order by id"
)


@dataclass
class Plan:
    """What this run enqueued, for the monitor and the summary."""

    run_id: str
    first_id: int = 0
    labels: dict[int, str] = field(default_factory=dict)
    flaky: set[int] = field(default_factory=set)
    orders: dict[int, dict[str, Any]] = field(default_factory=dict)  # job id -> payload
    baseline: dict[str, dict[str, int]] = field(default_factory=dict)


def _run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def enqueue(demo: DemoJobs, run_id: str) -> Plan:
    """Enqueue this run's jobs (keys unique to the run) and note what each one is."""
    from sqljobs._demo.display import counts

    plan = Plan(run_id=run_id)
    app = demo.app
    with app:
        with contextlib.suppress(ScheduleNotFound):
            # A paused schedule from an earlier run would stay paused: start afresh.
            app.schedules.remove(HEARTBEAT)
        plan.baseline = {s.queue: counts(s) for s in app.client.run(queries.queue_stats())}
        ids: list[int] = []
        for to, flaky in (("ada@example.com", True), ("grace@example.com", False),
                          ("linus@example.com", False)):
            job = demo.send_welcome.enqueue({"to": to, "flaky": flaky},
                                            key=f"demo:{run_id}:welcome:{to}")
            ids.append(job.id)
            plan.labels[job.id] = f"({to})"
            if flaky:
                plan.flaky.add(job.id)
        job = demo.sync_crm.enqueue({"email": "ada@example.com"}, key=f"demo:{run_id}:crm")
        ids.append(job.id)
        plan.labels[job.id] = "(ada@example.com)"
        for n, (amount, city) in enumerate(((4200, "Lisbon"), (1990, "Atlantis")), start=1):
            order = {"id": f"{run_id}/{n}", "amount_cents": amount, "ship_to": city}
            job = demo.fulfil_order.enqueue(order, key=f"demo:{run_id}:order:{n}")
            ids.append(job.id)
            plan.orders[job.id] = order
            plan.labels[job.id] = f"(order {order['id']} to {city})"
        job = demo.make_thumbnails.enqueue({"image": "cat.png"}, key=f"demo:{run_id}:thumbs")
        ids.append(job.id)
        plan.labels[job.id] = "(cat.png)"
    plan.first_id = min(ids)
    return plan


async def read_rows(conn: psycopg.AsyncConnection[Any], first_id: int) -> list[JobRow]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_ROWS, (first_id,))
        return [JobRow(**row) for row in await cur.fetchall()]


class Monitor:
    """A role beside the worker and the scheduler: shows progress, emits the payment
    events, pauses the cron task, and ends the run when every job is final."""

    def __init__(self, dsn: str, plan: Plan, display: Display, timeout_s: float) -> None:
        self.dsn = dsn
        self.plan = plan
        self.display = display
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self.finished = False
        self.interrupted = False  # stopped from outside (a signal) before the end
        self.paused = False
        self.ended = False  # the run ended by itself (all final, or the time limit)
        self.emitted: set[int] = set()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        if not (self.ended or self._stop.is_set()):
            self.interrupted = True
        self._stop.set()

    def stop_now(self) -> None:
        self.stop()

    async def run_async(self) -> int:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            client = AsyncClient(conn)
            while not self._stop.is_set():
                rows = await read_rows(conn, self.plan.first_id)
                stats = await client.run(queries.queue_stats())
                beats = sum(1 for r in rows if r.name == HEARTBEAT)
                elapsed = time.monotonic() - self.started
                self.display.update(
                    subtract(stats, self.plan.baseline, QUEUES),
                    f"{len(rows)} jobs, {sum(r.final for r in rows)} final; heartbeat fired "
                    f"{beats}x; {elapsed:.0f} s of at most {self.timeout_s:.0f} s")
                await self._emit_payments(client, rows, elapsed)
                if not self.paused and beats >= HEARTBEATS:
                    await client.run(queries.schedule_pause(HEARTBEAT))
                    self.paused = True
                    self.display.say(f"demo    the heartbeat fired {beats} times: the demo "
                                     f"pauses its schedule (jobs.schedule_pause)")
                elif self.paused and all(r.final for r in rows):
                    self.finished = self.ended = True
                    self.display.say("demo    every job of this run is final: stopping the "
                                     "worker and the scheduler")
                    break
                if elapsed > self.timeout_s:
                    self.display.say(f"demo    time limit ({self.timeout_s:.0f} s) reached: "
                                     f"stopping")
                    self.ended = True
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), POLL_S)
        self.ended = True
        return 0

    async def _emit_payments(self, client: AsyncClient, rows: list[JobRow],
                             elapsed: float) -> None:
        """Emit an order's payment event once the order waits for it (parked again
        after its sleep): the event wakes it at once."""
        for row in rows:
            order = self.plan.orders.get(row.id)
            if order is None or row.id in self.emitted or row.state != "parked":
                continue
            steps = await client.run(queries.job_steps(row.id))
            sleep = next((s for s in steps if s.kind == "sleep"), None)
            if sleep is None or row.run_at is None:
                continue
            until = datetime.fromisoformat(sleep.value["until"])
            if row.run_at > until or elapsed > EMIT_FALLBACK_S:
                self.display.say(f"demo    order {order['id']} waits for its payment: the "
                                 f"demo emits the event {PAYMENT_EVENT}")
                await client.run(queries.emit_event(
                    PAYMENT_EVENT, {"order": order["id"], "amount_cents": order["amount_cents"]}))
                self.emitted.add(row.id)


@contextlib.contextmanager
def _logs_through(display: Display) -> Iterator[None]:
    """While the demo runs, sqljobs' errors go through the display (its warnings would
    repeat the failures the jobs narrate themselves)."""

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            display.say(f"{record.levelname.lower()}: {record.name}: {record.getMessage()}")

    handler = Handler(logging.ERROR)
    sqljobs_logger = logging.getLogger("sqljobs")
    propagate = sqljobs_logger.propagate
    sqljobs_logger.addHandler(handler)
    sqljobs_logger.propagate = False
    try:
        yield
    finally:
        sqljobs_logger.removeHandler(handler)
        sqljobs_logger.propagate = propagate


def final_report(dsn: str, plan: Plan, *, embedded: bool, elapsed_s: float,
                 finished: bool, interrupted: bool = False) -> Report:
    """Pause the cron task (however the run ended: nothing should keep firing demo jobs),
    then read back what the run left in the database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with contextlib.suppress(ScheduleNotFound):
            Client(conn).run(queries.schedule_pause(HEARTBEAT))
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(_ROWS, (plan.first_id,))
            rows = [JobRow(**row) for row in cur.fetchall()]
        client = Client(conn)
        steps = {r.id: client.run(queries.job_steps(r.id)) for r in rows
                 if r.name in ("demo.fulfil_order", "demo.make_thumbnails")}
    return Report(run_id=plan.run_id, dsn=dsn, embedded=embedded, first_id=plan.first_id,
                  elapsed_s=elapsed_s, finished=finished and all(r.final for r in rows),
                  interrupted=interrupted, rows=rows, steps=steps, labels=plan.labels,
                  flaky=plan.flaky)


def run_demo(dsn: str, *, embedded: bool, timeout_s: float = 50.0,
             console: Console | None = None) -> int:
    """Run the demo on `dsn` (`embedded`: the embedded server's); answers the exit code:
    0 when every job kind did what the demo expects, 1 otherwise.

    Raises SchemaError when the database lacks the schema (`sqljobs migrate`)."""
    console = console or Console()
    display = make_display(console)
    run_id = _run_id()
    demo = build_app(dsn, display.say)
    started = time.monotonic()
    display.say(f"demo    run {run_id}: enqueueing the example jobs")
    plan = enqueue(demo, run_id)
    display.say(f"demo    enqueued {len(plan.labels)} jobs (ids {plan.first_id}.."
                f"{max(plan.labels)}; they will make more: child jobs and cron firings); "
                f"starting a worker and the scheduler in this process")
    worker = Worker(demo.app, concurrency=8, lease_s=10.0, poll_interval=0.2,
                    drain_timeout=5.0, install_signals=False)
    scheduler = Scheduler(demo.app, lease_s=3.0, tick=0.5, install_signals=False)
    monitor = Monitor(dsn, plan, display, timeout_s)
    display.start()
    try:
        with _logs_through(display):
            asyncio.run(run_roles_async([worker, scheduler, monitor]))
    finally:
        display.stop()
    report = final_report(dsn, plan, embedded=embedded,
                          elapsed_s=time.monotonic() - started, finished=monitor.finished,
                          interrupted=monitor.interrupted)
    lines, ok = render(report)
    display.print_lines(lines)
    return 0 if ok else 1


__all__ = ["QUEUES", "Monitor", "Plan", "enqueue", "final_report", "run_demo"]
