"""Run several roles in one process: a worker with a relay and/or a scheduler beside it.

    $ sqljobs worker myapp:app --with-relay --with-scheduler

Each role keeps its own connections and loop task; this module only owns the signals.
The first SIGTERM/SIGINT asks every role to stop gracefully at once (the worker drains,
the relay publishes the batch it holds, the scheduler finishes its round and releases
its lease); a second one stops every role at once. If one role ends on its own (or
fails), the others are stopped gracefully too. The exit code is the highest of theirs.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from typing import Protocol

logger = logging.getLogger("sqljobs.roles")


class Role(Protocol):
    """What `run_roles_async` needs of a role: built with install_signals=False."""

    async def run_async(self) -> int: ...

    def stop(self) -> None: ...

    def stop_now(self) -> None: ...


async def run_roles_async(roles: Sequence[Role], install_signals: bool = True) -> int:
    """Run the roles together until they all stop; answers the highest exit code."""
    loop = asyncio.get_running_loop()
    stopping = False

    def on_signal(signum: int) -> None:
        nonlocal stopping
        logger.info("%s received", signal.Signals(signum).name)
        for role in roles:
            if stopping:
                role.stop_now()
            else:
                role.stop()
        stopping = True

    installed: list[signal.Signals] = []
    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
    tasks = [asyncio.ensure_future(role.run_async()) for role in roles]
    try:
        pending: set[asyncio.Future[int]] = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending and not stopping:
                stopping = True
                for role in roles:
                    role.stop()
        # Every role's failure is retrieved (asyncio would print the others' tracebacks
        # as "never retrieved"); the first one is raised: the roles share one database,
        # so an unreachable one fails them all alike.
        failures = [error for task in tasks if (error := task.exception()) is not None]
        if failures:
            raise failures[0]
        codes = [task.result() for task in tasks]
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        for task in tasks:
            if not task.done():
                task.cancel()
    return max(codes, default=0)


__all__ = ["Role", "run_roles_async"]
