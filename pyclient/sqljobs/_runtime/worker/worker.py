"""The worker: claims jobs, runs their handlers, settles them in batches.

    worker = Worker(app, queues=["mail", "default"], concurrency=20)
    exit_code = worker.run()          # or: await worker.run_async(); app.run_worker(...)
    $ sqljobs worker myapp.jobs:app --queue mail --queue default --concurrency 20

One asyncio loop and a handful of connections (a small pool for claim, settle,
heartbeat and progress, plus one LISTEN connection), never one connection per job.
`Worker` wires the parts together and follows each job along its path, one file per
step of it (package `sqljobs._runtime.worker`):

    claiming.py     the claim loop: when to claim, how many (free slots + prefetch)
    prefetching.py  how many to claim ahead: fixed, or sized to the work
    runs.py         a held job (`Run`) and the slots: waiting -> running -> settling
    running.py      one handler run, from payload to the outcome to write; sagas
    turns.py        runners whose handlers never wait share the loop's time in turns
    settling.py     outcomes written many per statement (group commit); error records
    leases.py       every held lease renewed on a timer, lost runs stopped
    draining.py     SIGTERM: hand back what waits, let what runs finish, cut off
    (runtime/listening.py: the LISTEN connection that wakes the claim loop;
     runtime/supervisor.py: `--processes N`, several workers under one supervisor)

The path of a job, here: a claim holds it (`_hold`); one of `concurrency` runner tasks
takes it from the local queue and runs it in place (`_serve_runs`, `_execute`), so no
task is made per job; its outcome goes to the settler, whose callback ends it (`_done`).

What a crash can lose or repeat: no written outcome is lost; a run that finished but
whose settle had not committed runs again elsewhere once its lease lapses
(at-least-once); jobs still waiting locally go back `interrupted` on a clean stop, and
after a crash their leases lapse like any other.

The worker registers in `jobs.worker` (sql/45_workers.sql) and refreshes that row with
each heartbeat tick; a clean exit removes it. `sqljobs workers` lists live workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.records import ClaimedJob, JobState
from sqljobs._runtime.declarations import write_declarations
from sqljobs._runtime.lifecycle import Role
from sqljobs._runtime.listening import WAKE_CHANNEL, Listener
from sqljobs._runtime.observing import NO_WATCH, Observers, RunObserver
from sqljobs._runtime.threads import DaemonThreadPool
from sqljobs._runtime.worker.claiming import ClaimLoop
from sqljobs._runtime.worker.draining import Drain
from sqljobs._runtime.worker.leases import LeaseKeeper
from sqljobs._runtime.worker.prefetching import Prefetch
from sqljobs._runtime.worker.running import Runner
from sqljobs._runtime.worker.runs import Run, Slots
from sqljobs._runtime.worker.settle_keys import SettleKeys
from sqljobs._runtime.worker.settling import Settlement, Settler, error_record
from sqljobs._runtime.worker.turns import Turns

if TYPE_CHECKING:
    from sqljobs._declare.jobs import JobDefinition
    from sqljobs._declare.protocols import Deployed

logger = logging.getLogger("sqljobs.worker")

_TURN_S = 0.002  # the runners give the loop a turn at least this often (turns.py)
SPLIT_FLOOR = 16  # under limits, settle writes are split in halves no smaller than this


class Worker(Role):
    """Runs the jobs an `App` declares. See the module docstring for the guarantees."""

    kind = "worker"
    log = logger
    # claim, settle, heartbeats, progress, and the transaction that holds the settle
    # keys of outcomes waiting for busy rows (settle_keys.py); never one per job
    pool_size = (2, 5)

    def __init__(
        self,
        app: Deployed,
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        *,
        lease_s: float = 30.0,
        heartbeat_s: float | None = None,
        poll_interval: float = 1.0,
        prefetch: int | None = None,
        drain_timeout: float = 30.0,
        listen: bool = True,
        listen_retry_s: float = 1.0,
        install_signals: bool = True,
        worker_id: str | None = None,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        Role.__init__(self, app)
        definitions = {name: handle.definition for name, handle in app.jobs.items()}
        if not definitions:
            raise ConfigurationError("the app declares no jobs: a worker would run nothing")
        if concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if prefetch is not None and prefetch < 0:
            raise ConfigurationError("prefetch must be zero or more")
        if lease_s <= 0 or poll_interval <= 0 or drain_timeout < 0:
            raise ConfigurationError("lease_s and poll_interval must be positive, "
                                     "drain_timeout zero or more")
        if queues is not None and not queues:
            raise ConfigurationError("a worker needs at least one queue")
        # The queues to serve: as given, else every queue the declared jobs use; a job
        # declared without one uses the engine's default queue, read when the worker
        # starts (jobs.spec_defaults()).
        self.queues = list(dict.fromkeys(queues or sorted(
            {d.queue for d in definitions.values() if d.queue is not None})))
        self._default_queue_too = not queues and any(
            d.queue is None for d in definitions.values())
        self.names = sorted(definitions)
        self.code_version = app.code_version  # routes its claims (docs/howto-deploying.md)
        # A limit counts a job until its settle commits: with limits declared, the worker
        # claims again as soon as its own settles are written (claim_after_settling),
        # and writes them in halves (_write_most).
        self._limited = bool(app.declared_limits)
        self.concurrency = concurrency
        self.prefetch = Prefetch(prefetch, concurrency)  # None: auto (prefetching.py)
        self.lease_s = float(lease_s)
        self.heartbeat_s = float(heartbeat_s) if heartbeat_s else self.lease_s / 3
        if self.heartbeat_s >= self.lease_s:
            raise ConfigurationError("heartbeat_s must be shorter than lease_s")
        self.poll_interval = float(poll_interval)
        self.drain_timeout = float(drain_timeout)
        self.listen = listen
        self.listen_retry_s = float(listen_retry_s)
        self.install_signals = install_signals
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = worker_id or f"{self.host}:{self.pid}:{secrets.token_hex(3)}"
        self._definitions: dict[str, JobDefinition[Any]] = definitions
        self._slots = Slots(concurrency, self.prefetch)
        self._work = asyncio.Event()  # runs wait, or a slot may have freed: runners look
        self._turns = Turns(_TURN_S)  # the runners' share of the loop
        self._claims: ClaimLoop | None = None
        self._runner: Runner | None = None
        self._settler: Settler | None = None
        self._largest_claim = 0  # the most jobs one claim brought (_write_most)
        self._settle_keys: SettleKeys | None = None
        self._listener: Listener | None = None
        self._threads = DaemonThreadPool(concurrency, name=f"sqljobs-{self.pid}")
        self.counts = {}
        self._log_extra = {"worker_id": self.id}
        # metrics, tracing (the optional extras) or your own: sqljobs._runtime.observing
        self.observers = Observers(observers)
        # what the health probes read (sqljobs._runtime.health)
        self.running_loop: asyncio.AbstractEventLoop | None = None
        self.registered_at: float | None = None  # time.monotonic() of the last renewal

    @property
    def registration_ttl_s(self) -> float:
        """How long the worker's row lives unrenewed (`sqljobs workers` then drops it)."""
        return max(3 * self.heartbeat_s, 5.0)

    @property
    def claiming(self) -> bool:
        """True from the first claim on, until a stop is requested (drain)."""
        return self._claims is not None and not self._stopping

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._listener is not None and self._listener.listening

    # -- public control ---------------------------------------------------------------

    def _on_stop_requested(self) -> None:
        logger.info("draining: no new claims; %d running job(s) get %.0f s to finish",
                    len(self._slots.runs), self.drain_timeout, extra=self._log_extra)

    def _on_force_requested(self) -> None:
        logger.warning("stopping at once: %d running job(s) go back as interrupted",
                       len(self._slots.runs), extra=self._log_extra)

    # -- the role (sqljobs._runtime.lifecycle) -------------------------------------------

    async def _start(self, client: AsyncClient, dsn: str,
                     background: list[asyncio.Task[None]]) -> None:
        self.running_loop = asyncio.get_running_loop()
        if self._default_queue_too:
            default = (await client.run(queries.spec_defaults()))["queue"]
            self.queues = sorted({*self.queues, default})
        await write_declarations(client, self.app, log=logger, extra=self._log_extra)
        tokens = await client.run(queries.wake_tokens(self.queues))
        cancel_token = await client.run(queries.worker_token(self.id))
        await self._register()
        keys = self._settle_keys = SettleKeys(client, self._log_extra)
        leases = LeaseKeeper(client=client, slots=self._slots, lease_s=self.lease_s,
                             heartbeat_s=self.heartbeat_s, register=self._register,
                             keys=keys, log_extra=self._log_extra)
        self._wire(client, dsn, frozenset(tokens.values()), {cancel_token: leases.beat_now})
        assert self._settler is not None and self._claims is not None
        background.append(asyncio.create_task(self._settler.serve(), name="settler"))
        background.append(asyncio.create_task(keys.serve(), name="settle-keys"))
        background += [asyncio.create_task(self._serve_runs(), name=f"runner-{i}")
                       for i in range(self.concurrency)]
        background.append(asyncio.create_task(leases.serve(), name="heartbeats"))
        if self._listener is not None:
            background.append(asyncio.create_task(self._listener.serve(), name="listen"))

    def _started(self) -> str:
        return (f"queues={','.join(self.queues)} concurrency={self.concurrency} "
                f"prefetch={self.prefetch} jobs={len(self.names)} lease={self.lease_s:g}s "
                f"poll={self.poll_interval:g}s listen={'on' if self.listen else 'off'}")

    def _started_fields(self) -> dict[str, Any]:
        return {"queues": self.queues, "concurrency": self.concurrency, "names": self.names}

    async def _serve(self) -> None:
        assert self._claims is not None
        await self._claims.run()

    async def _drain(self) -> None:
        assert self._settler is not None
        await Drain(slots=self._slots, settler=self._settler, timeout=self.drain_timeout,
                    force_requested=self._force_requested, log_extra=self._log_extra).run()

    async def _finish(self, client: AsyncClient) -> None:
        try:
            await asyncio.wait_for(client.run(queries.worker_stop(self.id)), 5.0)
        except Exception as error:  # the row expires on its own
            logger.warning("could not deregister: %s", error, extra=self._log_extra)
        finally:
            self._threads.shutdown()

    def _wire(self, client: AsyncClient, dsn: str, wake_tokens: frozenset[str],
              also: Mapping[str, Callable[[], None]]) -> None:
        """The parts a running worker is made of (see the module docstring)."""
        keys = self._settle_keys
        assert keys is not None
        self._settler = Settler(client, self.id, keys, after_write=self._claim_after_settling,
                                most=self._write_most)
        self._runner = Runner(definitions=self._definitions, client=client,
                              threads=self._threads, worker_id=self.id, lease_s=self.lease_s,
                              log_extra=self._log_extra, observer=self.observers, keys=keys)
        self._claims = ClaimLoop(
            client=client, slots=self._slots, worker_id=self.id, queues=self.queues,
            names=self.names, version=self.code_version, lease_s=self.lease_s,
            poll_interval=self.poll_interval,
            wake=self._wake, claimed=self._hold, undecodable=self._fail_undecodable,
            stopping=lambda: self._stopping,
            sleep=self._sleep, log_extra=self._log_extra, observer=self.observers,
            cursor=not self._limited)
        if self.listen:  # jobs_wake carries a queue's token, never its name
            self._listener = Listener(
                dsn=dsn, channel=WAKE_CHANNEL, wake=self._claims.want,
                accept=wake_tokens.__contains__, retry_s=self.listen_retry_s,
                poll_interval=self.poll_interval, holder=self.id, log=logger,
                log_extra=self._log_extra, also=also)

    def _claim_after_settling(self) -> None:
        """With limits declared, the settles just written freed room in them: claim now
        rather than at the wake-up their trigger sends (a round trip through NOTIFY, while
        this worker's runners may wait for work)."""
        if self._limited and self._claims is not None:
            self._claims.want()

    async def _register(self) -> None:
        assert self._client is not None
        await self._client.run(queries.worker_heartbeat(
            self.id, self.queues, self.names, self.concurrency,
            ttl_s=self.registration_ttl_s, host=self.host, pid=self.pid,
            info={"lease_s": self.lease_s, "poll_interval": self.poll_interval}))
        self.registered_at = time.monotonic()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), seconds)

    # -- the path of a job: held, started, run, settled, released ----------------------

    def _write_most(self) -> int | None:
        """How many outcomes one settle write may take (None: every one waiting).

        With limits declared, half the largest claim this worker has had (at least
        `SPLIT_FLOOR`). A full global or queue limit counts a job until its settle
        commits, so a claim brings back about what the last write freed; short jobs all
        finish before their settle is written, and written whole they would free the
        limit all at once: the next claim would wait for that write, and claims and
        settles would take turns. Written in halves, the next claim takes the first
        half's slots while the second half is written (drain_limited in bench/)."""
        if not self._limited:
            return None
        return max(SPLIT_FLOOR, (self._largest_claim + 1) // 2)

    def _hold(self, jobs: list[ClaimedJob], sent: float) -> None:
        """Claimed jobs: each lease counts from when the claim was sent."""
        self._largest_claim = max(self._largest_claim, len(jobs))
        deadline = sent + self.lease_s
        hold = self._slots.hold
        for job in jobs:
            hold(Run(job, deadline))
        self._work.set()

    def _fail_undecodable(self, job: ClaimedJob, sent: float) -> None:
        """A claimed row whose jsonb Python cannot decode (`job.undecodable` says which
        column and why): it never runs. Its failure (kind "undecodable", no retry: the
        row would not decode next time either) goes to the settler at once, fenced by
        its claim like any outcome; it is held as settling until written."""
        assert self._settler is not None
        run = Run(job, sent + self.lease_s)
        run.settling = True
        self._slots.runs[job.id] = run
        self._settler.submit(run, Settlement(
            ack=False, mode="fail", error=error_record("undecodable", message=job.undecodable),
        ), self._undecodable_written)

    def _undecodable_written(self, run: Run, settlement: Settlement,
                             state: JobState | None) -> None:
        """A job with compensable steps answers running: its saga's unwind began. None
        of it can run from a row that does not decode: the same nack again fails it."""
        if state is JobState.RUNNING and self._settler is not None:
            self._settler.submit(run, settlement, self._done)
        else:
            self._done(run, settlement, state)

    async def _serve_runs(self) -> None:
        """One runner: starts waiting runs one after another while a slot is free
        (`concurrency` runners, so at most that many handlers at once)."""
        slots, work, turns = self._slots, self._work, self._turns
        while True:
            run = None
            if not self._stopping:
                run, dropped = slots.take()
                if dropped:
                    self.counts["lost"] = self.counts.get("lost", 0) + dropped
            if run is None:
                work.clear()
                await work.wait()
                continue
            try:
                await self._execute(run)
            except Exception:  # a bug here must not cost the worker a runner
                logger.exception("job %s: worker error after its run", run.job.id,
                                 extra=self._log_extra)
            self.prefetch.ran(time.monotonic() - run.started)
            # Handlers that never wait would keep the loop to the runners: let the
            # settler and the claim loop in every couple of milliseconds (turns.py).
            if turns.due():
                await turns.give_way()

    async def _execute(self, run: Run) -> None:
        assert self._runner is not None and self._settler is not None
        try:
            settlement = await self._runner.outcome(run)
            if settlement is not None and not settlement.written and run.ctx is not None \
                    and run.ctx.made_steps is not None:
                settlement = await self._runner.saga(run, settlement)
        except asyncio.CancelledError:
            self._runner.progress.forget(run.job.id)
            self._done(run, None, None)  # the worker stops: nothing written, the lease lapses
            raise
        except Exception:
            logger.exception("job %s: worker error", run.job.id,
                             extra={**self._log_extra, **run.log_fields})
            settlement = None
        # the run's last kept progress report goes before its outcome
        await self._runner.progress.settle(run.job.id, write=settlement is not None
                                           and run.stop_reason is None)
        if settlement is None or settlement.written:
            self._done(run, settlement, None)
        else:
            run.settling = True
            self._settler.submit(run, settlement, self._done)
        if run.thread is not None and not run.thread.done():
            # A sync handler Python cannot interrupt: its slot stays taken until its
            # thread returns (its outcome is already written or discarded).
            await asyncio.wrap_future(run.thread)
        self._slots.free(run)
        if run.is_settled:
            self._slots.release(run)
        # The context's callbacks hold the run: a cycle only the garbage collector would
        # free, and its collections cost a drain of no-op jobs a third of its Python time.
        run.ctx = None
        self._wake.set()

    def _done(self, run: Run, settlement: Settlement | None, state: JobState | None) -> None:
        """The run is over: its outcome is written (`state` is the job's now), was
        written by the run itself (a park, a saga), or nothing will be (lost)."""
        if settlement is None:
            label, error = "lost", None
        elif settlement.written:
            label, error = settlement.outcome(None), settlement.error
        else:
            label = settlement.outcome(state) if state is not None else "lost"
            error = settlement.error if state is not None else None
        self._ended(run, label, error)
        run.mark_settled()
        if not run.holds_slot:
            self._slots.release(run)
            # room for the runners (a settler that was behind) and for the next claim
            self._work.set()
            self._wake.set()
        self._log_outcome(run, settlement, state, label)

    def _log_outcome(self, run: Run, settlement: Settlement | None, state: JobState | None,
                     label: str) -> None:
        job = run.job
        if settlement is None:
            if logger.isEnabledFor(logging.WARNING):
                logger.warning("job %s stopped: no longer held by this worker (%s); nothing "
                               "written", job.id, run.stop_reason,
                               extra={**self._log_extra, **run.log_fields, "outcome": "lost"})
            return
        if not settlement.written and state is None:
            if logger.isEnabledFor(logging.WARNING):
                # (not "job N succeeded": the job is not; a cancel lands here too)
                logger.warning("job %s: its outcome (%s) was not written: the job is no "
                               "longer held by this worker (cancelled, or its lease lapsed "
                               "and another worker may run it again)", job.id,
                               settlement.label,
                               extra={**self._log_extra, **run.log_fields, "outcome": "lost"})
            return
        level = logging.INFO if settlement.ack or settlement.written or settlement.mode in (
            "shed", "interrupt") else logging.WARNING
        if not logger.isEnabledFor(level):
            return
        error = settlement.error or {}
        reason = f" ({error.get('kind')}: {error.get('message')})" if error else ""
        # what the job became (dead, not "nack:retry", when its last attempt failed)
        logger.log(level, "job %s %s %s%s", job.id, job.name, label, reason,
                   extra={**self._log_extra, **run.log_fields, "outcome": label,
                          "duration_ms": round((time.monotonic() - run.started) * 1000, 1),
                          "error_kind": error.get("kind")})

    def _ended(self, run: Run, label: str, error: Mapping[str, Any] | None) -> None:
        if run.ended is not None:
            return
        run.ended = label
        self.counts[label] = self.counts.get(label, 0) + 1
        if run.watch is not NO_WATCH:
            run.watch.ended(label, error, time.monotonic() - run.started)


def run_worker(app: Deployed, queues: Sequence[str] | None = None, concurrency: int = 10,
               **options: Any) -> int:
    """Run a worker for `app` until SIGTERM/SIGINT; answers the exit code."""
    return Worker(app, queues, concurrency, **options).run()


async def run_worker_async(app: Deployed, queues: Sequence[str] | None = None,
                           concurrency: int = 10, **options: Any) -> int:
    return await Worker(app, queues, concurrency, **options).run_async()


__all__ = ["Worker", "run_worker", "run_worker_async"]
