"""The outbox relay: publishes staged jobs (`handle.stage`, `jobs.stage`) as jobs.

    relay = Relay(app)                      # or: $ sqljobs relay myapp.jobs:app
    exit_code = relay.run()                 # or: await relay.run_async()

Each step is ONE call, `jobs.relay(batch, relay_id, lease_s)` (sql/70_outbox.sql): it
publishes the rows this relay claimed on its previous step (as jobs under their own
ids, deduped by key, fenced on this relay's id) and claims the next batch under a lease.
While a step holds or publishes rows the relay steps again at once; otherwise it waits
for a NOTIFY on `jobs_outbox` (sent by every staging transaction at commit) or
`poll_interval` seconds, whichever comes first. A lost LISTEN connection degrades to
polling and reconnects in the background.

Safe to run twice: relays claim disjoint rows (skip locked, and a live lease keeps
others off); a relay that dies holding a batch leaves it leased, and once the lease
lapses another relay claims and publishes it; a publish that meets a key that already
has a job records that job (`deduped`), so no staged row ever makes two jobs.

Shutdown in two phases: the first SIGTERM (or SIGINT) stops claiming, lets the step in
flight finish, then publishes the batch it holds with `jobs.relay(0, ...)` and stops
(exit 0). A second signal stops at once (exit 1): a batch still held is left to its
lease. Every `purge_interval` seconds the relay also deletes published rows older than
`retention_s` (`jobs.purge_outbox`, bounded batches).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING, Any

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import ConfigurationError
from sqljobs._runtime.lifecycle import Backoff, Role, failed
from sqljobs._runtime.listening import OUTBOX_CHANNEL, Listener

if TYPE_CHECKING:
    from sqljobs._declare.protocols import Deployed

logger = logging.getLogger("sqljobs.relay")

MAX_BATCH = 10_000  # jobs.relay's limit


class Relay(Role):
    """Publishes an app's database outbox. See the module docstring for the guarantees."""

    kind = "relay"
    log = logger

    def __init__(
        self,
        app: Deployed,
        *,
        batch: int = 500,
        lease_s: float = 30.0,
        poll_interval: float = 1.0,
        listen: bool = True,
        listen_retry_s: float = 1.0,
        retention_s: float = 86_400.0,
        purge_interval: float = 60.0,
        drain_timeout: float = 30.0,
        install_signals: bool = True,
        relay_id: str | None = None,
    ) -> None:
        Role.__init__(self, app)
        if not 1 <= batch <= MAX_BATCH:
            raise ConfigurationError(f"batch must be between 1 and {MAX_BATCH}")
        if lease_s <= 0 or poll_interval <= 0 or listen_retry_s <= 0:
            raise ConfigurationError("lease_s, poll_interval and listen_retry_s must be positive")
        if retention_s < 0 or purge_interval <= 0 or drain_timeout < 0:
            raise ConfigurationError("retention_s and drain_timeout must be zero or more, "
                                     "purge_interval positive")
        self.batch = batch
        self.lease_s = float(lease_s)
        self.poll_interval = float(poll_interval)
        self.listen = listen
        self.listen_retry_s = float(listen_retry_s)
        self.retention_s = float(retention_s)
        self.purge_interval = float(purge_interval)
        self.drain_timeout = float(drain_timeout)
        self.install_signals = install_signals
        self.id = relay_id or f"relay:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._listener: Listener | None = None
        self.held = 0  # rows claimed by the last step, published by the next
        self.counts = {"published": 0, "deduped": 0, "purged": 0}
        self._log_extra = {"relay_id": self.id}

    # -- control (thread-safe) ----------------------------------------------------------

    def _on_stop_requested(self) -> None:
        logger.info("relay draining: no new claims; publishing the batch held (%d rows)",
                    self.held, extra=self._log_extra)

    def _on_force_requested(self) -> None:
        logger.warning("relay stopping at once; %d held row(s) are left to their lease",
                       self.held, extra=self._log_extra)

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._listener is not None and self._listener.listening

    # -- the role (sqljobs._runtime.lifecycle) -------------------------------------------

    async def _start(self, client: AsyncClient, dsn: str,
                     background: list[asyncio.Task[None]]) -> None:
        if self.listen:
            listener = Listener(dsn=dsn, channel=OUTBOX_CHANNEL, wake=self._wake.set,
                                retry_s=self.listen_retry_s, poll_interval=self.poll_interval,
                                holder=self.id, log=logger, log_extra=self._log_extra)
            self._listener = listener
            background.append(asyncio.create_task(listener.serve(), name="relay-listen"))

    def _started(self) -> str:
        return (f"batch={self.batch} lease={self.lease_s:g}s poll={self.poll_interval:g}s "
                f"listen={'on' if self.listen else 'off'} retention={self.retention_s:g}s")

    async def _drain(self) -> None:
        await self._publish_held()

    async def step(self, batch: int | None = None) -> int:
        """One `jobs.relay` call; answers the rows it published."""
        assert self._client is not None
        result = await self._client.run(queries.relay(
            self.batch if batch is None else batch, self.id, self.lease_s))
        self.held = result.held
        self.counts["published"] += result.published
        self.counts["deduped"] += result.deduped
        if result.published:
            logger.debug("published %d (deduped %d), holding %d", result.published,
                         result.deduped, result.held, extra=self._log_extra)
        return result.published

    async def _serve(self) -> None:
        next_purge = time.monotonic() + self.purge_interval
        backoff = Backoff(cap=max(self.poll_interval, 1.0))
        while not self._stopping:
            self._wake.clear()
            try:
                published = await self.step()
                if time.monotonic() >= next_purge:
                    next_purge = time.monotonic() + self.purge_interval
                    await self._purge()
            except Exception as error:
                pause = backoff.next()
                failed(logger, "relay step", error, pause, self._log_extra)
                await self._pause(pause)
                continue
            backoff.reset()
            if self.held or published:
                continue  # publish what we hold, or look for more, at once
            await self._pause(self.poll_interval)

    async def _publish_held(self) -> None:
        """Drain phase: publish the batch this relay holds (jobs.relay with batch 0)."""
        deadline = time.monotonic() + self.drain_timeout
        while self.held and not self._forced:
            try:
                await self.step(0)
            except Exception as error:
                if time.monotonic() >= deadline:
                    logger.error("could not publish the %d held row(s) (%s); their lease "
                                 "will lapse and another relay will publish them", self.held,
                                 error, extra=self._log_extra)
                    return
                await asyncio.sleep(0.5)

    async def _purge(self) -> None:
        assert self._client is not None
        while True:
            swept = await self._client.run(queries.purge_outbox(self.retention_s, 1000))
            self.counts["purged"] += swept.purged
            if swept.purged == 0 or swept.remaining == 0 or self._stopping:
                return


def run_relay(app: Deployed, **options: Any) -> int:
    """Run a relay for `app`'s database until SIGTERM/SIGINT; answers the exit code."""
    return Relay(app, **options).run()


__all__ = ["OUTBOX_CHANNEL", "Relay", "run_relay"]
