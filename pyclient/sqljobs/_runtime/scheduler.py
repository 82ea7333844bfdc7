"""The scheduler: one leader fires every schedule's occurrences as jobs.

    scheduler = Scheduler(app)          # or: $ sqljobs scheduler myapp.jobs:app
    exit_code = scheduler.run()         #     $ sqljobs worker myapp.jobs:app --with-scheduler

At start it writes the app's declared tasks to `jobs.schedule` (keeping their paused
state and watermark), and its declared limits and job types (its role,
sqljobs_scheduler, may; a worker's may not write limits: sqljobs._runtime.declarations).
Then, every `tick` seconds (sooner when an occurrence is due):

1. Leadership: `jobs.leader_acquire('scheduler', id, lease_s)` takes or renews the
   lease and answers its fencing token, or null while another scheduler holds it (this
   one then just waits). The lease is also held on this process's clock: a leader that
   could not renew within `lease_s` of its last renewal stops dispatching.
2. One dispatch round (never two at once): read the schedules and the database clock
   (`jobs.now()`, so hosts' clocks do not matter); for each active schedule, the
   occurrences after its watermark up to now, by its catch-up policy:
     all     every missed occurrence, oldest first (at most `max_catch_up` per round);
     latest  only the latest one;
     none    only occurrences at most `misfire_grace_s` old; older ones are skipped.
   `jobs.schedule_fire(name, occurrences, watermark, token)` enqueues them under
   occurrence-scoped keys ("<schedule>@<UTC ISO instant>") and moves the watermark in
   the same transaction, fenced on the token: a scheduler that lost the lease gets
   NotLeader and stops dispatching at once. A second scheduler, a restart or a skewed
   clock can therefore never fire an occurrence twice.

3. Retention: every `purge_every` seconds the leader runs ONE bounded
   `jobs.retention_sweep` batch (at most `purge_batch` rows) under the stored policy
   (jobs.retention, else the built-in defaults; docs/howto-retention.md). While rows
   remain eligible it runs one
   more batch on each following tick, so a backlog drains without holding the leader:
   a round never waits on more than one batch. `purge_every=None` disables it (then run
   `sqljobs purge` from cron, or call jobs.purge yourself).

SIGTERM/SIGINT: finish the round in flight, release the lease (so a standby takes over
at once), exit 0. A second signal stops at once (exit 1; the lease lapses by itself).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import (
    ConfigurationError,
    DatabaseError,
    NotLeader,
    ScheduleNotFound,
)
from sqljobs._client.records import CatchUp, ScheduleRecord
from sqljobs._declare.cron import Cron
from sqljobs._runtime.declarations import write_declarations
from sqljobs._runtime.lifecycle import Backoff, Role, failed

if TYPE_CHECKING:
    from sqljobs._declare.protocols import Deployed

logger = logging.getLogger("sqljobs.scheduler")

ROLE = "scheduler"


@dataclass(frozen=True)
class FirePlan:
    """What one round fires for one schedule, and where its watermark moves."""

    occurrences: list[datetime]
    watermark: datetime
    skipped: bool  # occurrences after the old watermark that are not fired

    @property
    def needed(self) -> bool:
        return bool(self.occurrences) or self.skipped


def plan_fire(cron: Cron, catch_up: CatchUp, watermark: datetime, now: datetime, *,
              misfire_grace_s: float, max_catch_up: int) -> FirePlan:
    """The occurrences in (watermark, now] to fire by the policy, and the new watermark."""
    if catch_up == "all":
        due = cron.between(watermark, now, limit=max_catch_up)
        capped = len(due) == max_catch_up and cron.next_after(due[-1]) <= now
        return FirePlan(due, due[-1] if capped else now, False)
    latest = cron.latest(watermark, now)
    if latest is None:
        return FirePlan([], now, False)
    if catch_up == "latest":
        return FirePlan([latest], now, cron.next_after(watermark) < latest)
    recent = cron.between(max(watermark, now - timedelta(seconds=misfire_grace_s)), now,
                          limit=max_catch_up)
    return FirePlan(recent, now, cron.next_after(watermark) < (recent[0] if recent else now))


class Scheduler(Role):
    """Fires an app's schedules as jobs, as the one leader. See the module docstring."""

    kind = "scheduler"
    log = logger

    def __init__(
        self,
        app: Deployed,
        *,
        lease_s: float = 10.0,
        tick: float = 1.0,
        misfire_grace_s: float | None = None,
        max_catch_up: int = 1000,
        sync_declared: bool = True,
        install_signals: bool = True,
        scheduler_id: str | None = None,
        purge_every: float | None = 60.0,
        purge_batch: int = 1000,
    ) -> None:
        Role.__init__(self, app)
        if lease_s <= 0 or tick <= 0:
            raise ConfigurationError("lease_s and tick must be positive")
        if tick > lease_s / 3:
            raise ConfigurationError("tick must be at most lease_s / 3 so the lease is renewed "
                                     "in time")
        if max_catch_up < 1:
            raise ConfigurationError("max_catch_up must be at least 1")
        if purge_every is not None and purge_every <= 0:
            raise ConfigurationError("purge_every must be positive, or None to disable purging")
        if not 1 <= purge_batch <= 100_000:
            raise ConfigurationError("purge_batch must be between 1 and 100000")
        self.lease_s = float(lease_s)
        self.tick = float(tick)
        self.misfire_grace_s = (max(5.0, 2 * self.tick) if misfire_grace_s is None
                                else float(misfire_grace_s))
        self.max_catch_up = max_catch_up
        self.purge_every = None if purge_every is None else float(purge_every)
        self.purge_batch = purge_batch
        self._next_purge = 0.0  # monotonic: the first round that leads purges
        self.sync_declared = sync_declared
        self.install_signals = install_signals
        self.id = scheduler_id or (
            f"scheduler:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}")
        self.token: int | None = None  # the fencing token while this scheduler leads
        self.counts = {"fired": 0, "deduped": 0, "rounds": 0, "purged": 0}
        self._lease_deadline = 0.0  # monotonic: leadership is lost after this
        self._bad_cron: dict[str, str] = {}
        self._log_extra = {"scheduler_id": self.id}

    # -- control (thread-safe) ----------------------------------------------------------

    def _on_stop_requested(self) -> None:
        logger.info("scheduler stopping after the round in flight", extra=self._log_extra)

    @property
    def leading(self) -> bool:
        return self.token is not None and time.monotonic() < self._lease_deadline

    # -- the role (sqljobs._runtime.lifecycle) -------------------------------------------

    async def _start(self, client: AsyncClient, dsn: str,
                     background: list[asyncio.Task[None]]) -> None:
        if self.sync_declared:  # the fleet's configuration from code (sqljobs_scheduler)
            for task in self.app.tasks.values():
                await client.run(queries.schedule_put(task.name, task.definition()))
            await write_declarations(client, self.app, log=logger, extra=self._log_extra)

    def _started(self) -> str:
        return f"lease={self.lease_s:g}s tick={self.tick:g}s tasks={len(self.app.tasks)}"

    async def _finish(self, client: AsyncClient) -> None:
        """Release the lease so a standby takes over at once (after a clean stop)."""
        token, self.token = self.token, None
        if token is not None and not self._forced:
            await asyncio.wait_for(client.run(queries.leader_release(ROLE, self.id, token)),
                                   5.0)
            logger.info("released the scheduler lease", extra=self._log_extra)

    async def _serve(self) -> None:
        backoff = Backoff(cap=self.tick)  # a leader must retry within its lease
        while not self._stopping:
            self._wake.clear()
            wait = self.tick
            try:
                if await self.acquire():
                    next_due = await self.dispatch_round()
                    if next_due is not None:
                        wait = min(wait, max(0.0, next_due))
                    await self.purge_round()
            except Exception as error:
                wait = backoff.next()
                failed(logger, "scheduler round", error, wait, self._log_extra)
            else:
                backoff.reset()
            await self._pause(wait)

    async def acquire(self) -> bool:
        """Take or renew the lease; answers whether this scheduler leads now."""
        assert self._client is not None
        sent = time.monotonic()
        token = await self._client.run(queries.leader_acquire(ROLE, self.id, self.lease_s))
        if token is None:
            if self.token is not None:
                logger.warning("lost the scheduler lease: another scheduler leads; "
                               "dispatching stopped", extra=self._log_extra)
            self.token = None
            return False
        if token != self.token:
            logger.info("leading the scheduler", extra=self._log_extra)
        self.token = token
        self._lease_deadline = sent + self.lease_s
        return True

    async def dispatch_round(self, now: datetime | None = None) -> float | None:
        """One round: fire what is due. Answers seconds until the next occurrence (None
        when nothing is scheduled). `now` overrides the database clock (tests)."""
        assert self._client is not None
        client = self._client
        if now is None:
            now = await client.run(queries.database_now())
        self.counts["rounds"] += 1
        next_due: datetime | None = None
        for record in await client.run(queries.schedules()):
            if self._stopping and self._forced:
                break
            cron = self._cron(record)
            if cron is None or record.paused:
                continue
            plan = plan_fire(cron, record.catch_up, record.watermark, now,
                             misfire_grace_s=self.misfire_grace_s, max_catch_up=self.max_catch_up)
            if plan.needed:
                if not self.leading or self.token is None:
                    logger.warning("scheduler lease not renewed in time; dispatching stopped",
                                   extra=self._log_extra)
                    self.token = None
                    return None
                try:
                    fired = await client.run(queries.schedule_fire(
                        record.name, plan.occurrences, plan.watermark, self.token))
                except NotLeader:
                    logger.warning("not the leader any more; dispatching stopped",
                                   extra=self._log_extra)
                    self.token = None
                    return None
                except ScheduleNotFound:
                    continue  # removed while this round ran
                except DatabaseError as error:  # e.g. its stored options no longer enqueue
                    logger.error("schedule %s could not fire: %s", record.name, error,
                                 extra={**self._log_extra, "schedule": record.name})
                    continue
                for f in fired:
                    self.counts["deduped" if f.outcome == "deduped" else "fired"] += 1
                if fired:
                    logger.info("fired %s: %s", record.name,
                                ", ".join(f.occurrence.isoformat() for f in fired[:5])
                                + (f" (+{len(fired) - 5})" if len(fired) > 5 else ""),
                                extra={**self._log_extra, "schedule": record.name})
            # A capped catch-up (watermark behind now) continues at once.
            upcoming = cron.next_after(plan.watermark if plan.needed else max(record.watermark,
                                                                              now))
            next_due = upcoming if next_due is None else min(next_due, upcoming)
        if next_due is None:
            return None
        return (next_due - now).total_seconds()

    async def purge_round(self) -> int | None:
        """One bounded retention batch when one is due and this scheduler leads; answers
        the rows deleted (None when no batch ran)."""
        assert self._client is not None
        if self.purge_every is None or not self.leading or self._stopping:
            return None
        if time.monotonic() < self._next_purge:
            return None
        # A batch that fails waits a period too (the round's error handling logs it).
        self._next_purge = time.monotonic() + self.purge_every
        step = await self._client.run(queries.retention_sweep(self.purge_batch))
        self.counts["purged"] += step.deleted
        if step.remaining > 0:
            self._next_purge = 0.0  # still eligible: the next tick takes the next batch
        if step.deleted:
            logger.info("purged %d jobs, %d outbox rows, %d events (%d still eligible)",
                        step.jobs, step.outbox, step.events, step.remaining,
                        extra={**self._log_extra, "purged": step.deleted,
                               "remaining": step.remaining})
        return step.deleted

    def _cron(self, record: ScheduleRecord) -> Cron | None:
        try:
            cron = Cron(record.cron, record.timezone)
        except ConfigurationError as error:
            if self._bad_cron.get(record.name) != record.cron:
                logger.error("schedule %s is skipped: %s", record.name, error,
                             extra={**self._log_extra, "schedule": record.name})
                self._bad_cron[record.name] = record.cron
            return None
        self._bad_cron.pop(record.name, None)
        return cron


def run_scheduler(app: Deployed, **options: Any) -> int:
    """Run a scheduler for `app` until SIGTERM/SIGINT; answers the exit code."""
    return Scheduler(app, **options).run()


__all__ = ["FirePlan", "Scheduler", "plan_fire", "run_scheduler"]
