"""Listening: a LISTEN connection that wakes a role's loop when there is work.

Enqueue notifies `jobs_wake` with the queue's name (once per queue and transaction),
staging notifies `jobs_outbox`. The worker and the relay each hold one such connection
and are woken by the notifications they care about. If the connection fails the role
keeps polling; this reconnects after `retry_s`, doubling up to 30 s, and on
reconnecting wakes the role once to catch up with anything missed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql

WAKE_CHANNEL = "jobs_wake"
OUTBOX_CHANNEL = "jobs_outbox"


class Listener:
    """Holds a LISTEN connection on `channel`; calls `wake()` for every notification
    whose payload `accept` takes (every one when `accept` is None)."""

    def __init__(self, *, dsn: str, channel: str, wake: Callable[[], None],
                 accept: Callable[[str], bool] | None = None, retry_s: float,
                 poll_interval: float, holder: str, log: logging.Logger,
                 log_extra: Mapping[str, Any],
                 also: Mapping[str, Callable[[], None]] | None = None) -> None:
        self._dsn = dsn
        self._channel = channel
        self._wake = wake
        self._accept = accept
        self._also = dict(also or {})  # payloads with a callback of their own
        self._retry_s = retry_s
        self._poll_interval = poll_interval
        self._holder = holder
        self._log = log
        self._log_extra = dict(log_extra)
        self.listening = False

    async def serve(self) -> None:
        delay = self._retry_s
        lost = False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True,
                    application_name=f"sqljobs-listen {self._holder}"[:63])
                async with conn:
                    await conn.execute(sql.SQL("listen {}").format(sql.Identifier(self._channel)))
                    self.listening = True
                    if lost:
                        self._log.info("LISTEN %s reconnected", self._channel,
                                       extra=self._log_extra)
                    delay = self._retry_s
                    self._wake()  # catch up with anything missed meanwhile
                    async for notify in conn.notifies():
                        special = self._also.get(notify.payload)
                        if special is not None:
                            special()
                        elif self._accept is None or self._accept(notify.payload):
                            self._wake()
            except asyncio.CancelledError:
                self.listening = False
                raise
            except Exception as error:
                self._log.warning("LISTEN %s connection lost (%s); polling every %g s until "
                                  "it reconnects",
                                  self._channel, error, self._poll_interval,
                                  extra=self._log_extra)
            self.listening = False
            lost = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, max(30.0, self._retry_s))


__all__ = ["OUTBOX_CHANNEL", "WAKE_CHANNEL", "Listener"]
