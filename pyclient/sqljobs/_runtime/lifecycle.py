"""The skeleton every long-running role shares: the worker, the relay, the scheduler.

A role implements its own loop and its drain; `Role.run_async` does the rest, the same
way for all three:

    connect  one connection first, within `connect_timeout` (30 s): a database that
             cannot be reached stops the role at once with `DatabaseUnreachable`, whose
             one line names where and why (a refused connection fails on the first
             attempt; a server that is starting or full is tried again until then)
    pool     a small asyncio pool of its own (`sqljobs-<kind> <id>` in pg_stat_activity),
             opened within the same timeout, psycopg.pool's retry warnings held back
    check    the schema: older than this client needs, or no longer serving it, stops
             the role before it does anything (SchemaError)
    start    `_start`: what it writes first and the background tasks it keeps
    signals  SIGTERM/SIGINT (when it installs them): the first asks for the drain, a
             second stops at once (Celery's habit); `stop()` / `stop_now()` from any
             thread do the same
    serve    `_serve`: its loop, until a stop is asked for
    drain    `_drain`: what a graceful stop finishes (skipped after a forced one)
    finish   `_finish`: what it leaves tidy (deregister, release a lease); the
             background tasks are cancelled and the pool closed, whatever happened
    exit     0 after a drain, 1 after a forced stop, with one line of its counts

A failing step of a loop waits by one backoff policy (`Backoff`) and says why in one
line (`failed`): a connection error as a warning, anything else with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from sqljobs._client.connection import AsyncClient
from sqljobs._client.database import check_schema_async
from sqljobs._client.errors import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from sqljobs._declare.protocols import Deployed

logger = logging.getLogger("sqljobs")


class Backoff:
    """The pause after consecutive failures: `first` seconds, doubling, at most `cap`."""

    def __init__(self, first: float = 0.2, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.failures = 0

    def next(self) -> float:
        """The pause after one more failure."""
        self.failures += 1
        return float(min(self.first * 2 ** min(self.failures - 1, 6), self.cap))

    def reset(self) -> None:
        self.failures = 0


def first_line(error: BaseException) -> str:
    """An error's message without the QUERY / CONTEXT lines the server appends."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def failed(log: logging.Logger, what: str, error: BaseException, pause: float | None,
           extra: dict[str, Any]) -> None:
    """One line about a failed step: a connection error is expected (warning, its first
    line); anything else is a bug or a misconfiguration (error, with its traceback)."""
    then = f"; retrying in {pause:.1f} s" if pause is not None else ""
    if isinstance(error, TRANSIENT_ERRORS):
        log.warning("%s failed (%s)%s", what, first_line(error), then, extra=extra)
    else:
        log.error("%s failed%s", what, then, exc_info=error, extra=extra)


class DatabaseUnreachable(psycopg.OperationalError):
    """A role could not connect to its database at start-up: `where` (host:port, never
    the password) and `reason` (the server's or libpq's first line, or the timeout)."""

    def __init__(self, kind: str, where: str, reason: str) -> None:
        super().__init__(f"cannot connect to the database at {where}: {reason}")
        self.kind = kind
        self.where = where
        self.reason = reason


def where_of(dsn: str) -> str:
    """host:port of a DSN, as libpq would pick them (never its password)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "the given DSN"
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST")
               or "the local socket")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    return f"{host}:{port}"


# What libpq says before the reason: `connection failed: connection to server at "h"
# (10.0.0.5), port 5432 failed: ` or `... on socket "/run/...": `.
_PREFIX = re.compile(r'^(connection failed: )?(connection to server (at|on socket) .*? '
                     r'failed: )?')
# Refusals a server gives while it starts, stops or is full: worth another try.
_TRANSIENT = ("starting up", "shutting down", "too many clients", "remaining connection slots",
              "in recovery mode")


def reason_of(error: BaseException) -> str:
    """The cause of a failed connection in a few words: `Connection refused`,
    `FATAL:  password authentication failed for user "app"`."""
    text = first_line(error)
    return " ".join(_PREFIX.sub("", text).split()) or type(error).__name__


class _HoldBack(logging.Filter):
    """Drops psycopg.pool's records (a warning for each failed attempt) while installed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def _pool_quiet() -> Iterator[None]:
    pool_log = logging.getLogger("psycopg.pool")
    held = _HoldBack()
    pool_log.addFilter(held)
    try:
        yield
    finally:
        pool_log.removeFilter(held)


class Role:
    """A long-running role (see the module docstring); subclasses set `kind`, `id`,
    `install_signals`, `counts` and `_log_extra`, and implement the hooks."""

    kind: str                    # worker | relay | scheduler
    id: str
    install_signals: bool
    counts: dict[str, int]
    _log_extra: dict[str, Any]
    pool_size: tuple[int, int] = (1, 2)
    # Seconds the start may take to reach the database before the role gives up
    # (`DatabaseUnreachable`, one line; a platform starts it again).
    connect_timeout: float = 30.0
    log: logging.Logger = logger

    def __init__(self, app: Deployed) -> None:
        self.app = app
        self._stopping = False
        self._forced = False
        self._wake = asyncio.Event()  # a stop, or work for the loop (a NOTIFY)
        self._stop_requested = asyncio.Event()
        self._force_requested = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: AsyncClient | None = None

    # -- the hooks a role implements ------------------------------------------------------

    async def _start(self, client: AsyncClient, dsn: str,
                     background: list[asyncio.Task[None]]) -> None:
        """What the role writes before it serves, and the tasks it keeps beside its loop."""

    def _started(self) -> str:
        """The start line's details (after "sqljobs <kind> <id> started: ")."""
        return ""

    def _started_fields(self) -> dict[str, Any]:
        """What the start line carries besides, for structured (JSON) logs."""
        return {}

    async def _serve(self) -> None:
        """The role's loop: runs until `_stopping`."""
        raise NotImplementedError

    async def _drain(self) -> None:
        """What a graceful stop finishes before the role exits."""

    async def _finish(self, client: AsyncClient) -> None:
        """What the role leaves tidy as it exits (after a drain or not)."""

    def _on_stop_requested(self) -> None:
        """Called once, on the loop, when a graceful stop is first asked for."""

    def _on_force_requested(self) -> None:
        """Called on the loop each time an immediate stop is asked for."""

    # -- running ------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; answers the exit code (0 after a drain, 1 after a forced stop)."""
        return asyncio.run(self.run_async())

    async def run_async(self) -> int:
        """Run until stopped; answers the exit code (0 after a drain, 1 after a forced stop)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._stopping:  # asked to stop before it ran
            self._stop_requested.set()
        dsn = self.app.dsn
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=self.pool_size[0], max_size=self.pool_size[1], open=False,
            timeout=10.0, name=f"sqljobs-{self.kind}",
            kwargs={"autocommit": True, "prepare_threshold": 0,
                    "application_name": f"sqljobs-{self.kind} {self.id}"[:63]})
        await self._open(dsn, pool)
        client = self._client = AsyncClient(pool)
        background: list[asyncio.Task[None]] = []
        signals: list[signal.Signals] = []
        try:
            await check_schema_async(client)
            await self._start(client, dsn, background)
            signals = self._install_signals(loop)
            self.log.info("sqljobs %s %s started: %s", self.kind, self.id, self._started(),
                          extra={**self._log_extra, **self._started_fields()})
            await self._serve()
            if not self._forced:
                await self._drain()
        finally:
            self._remove_signals(loop, signals)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            with contextlib.suppress(Exception):  # (what it could not tidy, it logged)
                await self._finish(client)
            await pool.close()
            self._client = None
        code = 1 if self._forced else 0
        self.log.info("sqljobs %s %s stopped (exit %d): %s", self.kind, self.id, code,
                      ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
                      or "nothing done", extra={**self._log_extra, "counts": dict(self.counts)})
        return code

    async def _open(self, dsn: str, pool: AsyncConnectionPool[Any]) -> None:
        """Reach the database once, then open the pool, all within `connect_timeout`;
        else raise `DatabaseUnreachable`. The pool retries quietly meanwhile (its
        warnings would say the same thing every second)."""
        deadline = time.monotonic() + self.connect_timeout
        where = where_of(dsn)
        backoff = Backoff(first=0.2, cap=1.0)
        while True:
            left = deadline - time.monotonic()
            try:
                conn = await asyncio.wait_for(
                    psycopg.AsyncConnection.connect(dsn, autocommit=True), max(left, 0.01))
            except TimeoutError:
                raise DatabaseUnreachable(
                    self.kind, where, f"no answer within {self.connect_timeout:g} s") from None
            except psycopg.OperationalError as error:
                reason = reason_of(error)
                pause = backoff.next()
                if (not any(word in reason for word in _TRANSIENT)
                        or time.monotonic() + pause >= deadline):
                    raise DatabaseUnreachable(self.kind, where, reason) from error
                await asyncio.sleep(pause)
                continue
            await conn.close()
            break
        try:
            with _pool_quiet():
                await pool.open(wait=True,
                                timeout=max(deadline - time.monotonic(), 1.0))
        except PoolTimeout as error:
            await pool.close()
            raise DatabaseUnreachable(
                self.kind, where, f"the pool found no connection within "
                                  f"{self.connect_timeout:g} s") from error

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less when woken (a NOTIFY, a stop)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    # -- stopping (thread-safe) -----------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop (thread-safe): the role's drain."""
        self._call_soon(self._request_stop)

    def stop_now(self) -> None:
        """Immediate stop (thread-safe)."""
        self._call_soon(self._request_force)

    def _call_soon(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None:  # not running yet: it will stop as soon as it starts
            self._stopping = True
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    def _request_stop(self) -> None:
        if not self._stopping:
            self._on_stop_requested()
        self._stopping = True
        self._stop_requested.set()
        self._wake.set()

    def _request_force(self) -> None:
        self._on_force_requested()
        self._forced = True
        self._force_requested.set()
        self._request_stop()

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._stopping:
            logger.warning("second signal (%s): stopping at once", name, extra=self._log_extra)
            self._request_force()
        else:
            logger.info("%s received", name, extra=self._log_extra)
            self._request_stop()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        """SIGTERM and SIGINT handlers on `loop` (when the role installs them)."""
        installed: list[signal.Signals] = []
        if self.install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
        return installed

    @staticmethod
    def _remove_signals(loop: asyncio.AbstractEventLoop, installed: list[signal.Signals]) -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)


__all__ = ["Backoff", "DatabaseUnreachable", "Role", "failed", "first_line", "reason_of",
           "where_of"]
