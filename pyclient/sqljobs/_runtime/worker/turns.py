"""Turns: runners of handlers that never wait leave the event loop to the rest in time.

A handler that awaits nothing (a no-op, a quick computation) returns without giving
the loop back, so a runner taking job after job keeps it. Were each runner to yield
every couple of milliseconds on its own clock, a settler or claim loop woken behind
`concurrency` runners would wait for a burst of each of them, because the loop runs
ready tasks in the order they became ready (10 runners: up to 20 ms, while its write or
its claim could be running on the database). The budget is shared instead: once the
runners together have run `budget_s` since the loop last came round, each of them
yields at its next job boundary, and runs nothing more until the loop has come round
once (a callback queued behind every task ready now: the settler, the claim loop, the
other runners).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Turns:
    """The runners' shared time budget between two rounds of the event loop."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._budget_s = budget_s
        self._clock = clock
        self._since = clock()  # the loop last came round
        self._round_pending = False

    def due(self) -> bool:
        """The runners have had the loop for their budget (or a round is pending)."""
        return self._round_pending or self._clock() - self._since > self._budget_s

    async def give_way(self) -> None:
        """Yield until the loop has come round once (every task ready now has run)."""
        if not self._round_pending:
            self._round_pending = True
            asyncio.get_running_loop().call_soon(self._came_round)
        while self._round_pending:
            await asyncio.sleep(0)

    def _came_round(self) -> None:
        self._round_pending = False
        self._since = self._clock()


__all__ = ["Turns"]
