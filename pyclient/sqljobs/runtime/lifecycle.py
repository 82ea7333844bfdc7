"""Stop control shared by the long-running roles (worker, relay, scheduler).

`stop()` asks for the role's graceful stop (its drain), `stop_now()` for an immediate
one; both are thread-safe. Signals follow Celery's habit: the first SIGTERM or SIGINT
drains, a second of either kind stops at once. A role says what its drain and its
forced stop mean through `_on_stop_requested` / `_on_force_requested` (log lines and
role-specific flags); the loop it runs watches `_stopping`, `_forced` and `_wake`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("sqljobs")


class Role:
    install_signals: bool
    _log_extra: dict[str, Any]

    def __init__(self) -> None:
        self._stopping = False
        self._forced = False
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

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

    def _on_stop_requested(self) -> None:
        """Called once, on the loop, when a graceful stop is first asked for."""

    def _on_force_requested(self) -> None:
        """Called on the loop each time an immediate stop is asked for."""

    def _request_stop(self) -> None:
        if not self._stopping:
            self._on_stop_requested()
        self._stopping = True
        self._wake.set()

    def _request_force(self) -> None:
        self._on_force_requested()
        self._forced = True
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
