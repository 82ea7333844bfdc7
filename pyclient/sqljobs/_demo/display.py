"""How the demo shows progress: a Rich Live table on a terminal, plain lines elsewhere.

Both show the same thing: the demo's queues and their job counts by state, read from
`jobs.queue_stats()` (minus what those queues held before this run), plus the lines the
jobs and the demo say as things happen. `say` may be called from any thread.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from sqljobs._client.records import QueueStats

STATES = ("ready", "running", "parked", "succeeded", "failed", "dead")


def counts(stats: QueueStats) -> dict[str, int]:
    return {state: int(getattr(stats, state)) for state in STATES}


def subtract(now: Sequence[QueueStats], before: dict[str, dict[str, int]],
             queues: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per demo queue, the counts by state of this run: now minus before, at least 0."""
    found = {s.queue: counts(s) for s in now}
    zero = dict.fromkeys(STATES, 0)
    return {queue: {state: max(0, found.get(queue, zero)[state]
                               - before.get(queue, zero)[state]) for state in STATES}
            for queue in queues}


class Display(Protocol):
    def start(self) -> None: ...

    def say(self, line: str) -> None: ...

    def update(self, table: dict[str, dict[str, int]], note: str) -> None: ...

    def stop(self) -> None: ...

    def print_lines(self, lines: Sequence[str]) -> None: ...


class _Clock:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def stamp(self) -> str:
        return f"{time.monotonic() - self.started:5.1f}s"


class LiveDisplay:
    """A terminal: a live table below the lines said so far."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.clock = _Clock()
        self._live: Live | None = None
        self._table: dict[str, dict[str, int]] = {}
        self._note = ""

    def _render(self) -> Table:
        table = Table(title="sqljobs demo: this run's jobs by queue and state "
                            "(jobs.queue_stats())",
                      caption=self._note or None, title_justify="left")
        table.add_column("queue")
        styles = {"ready": "cyan", "running": "yellow", "parked": "magenta",
                  "succeeded": "green", "failed": "red", "dead": "red"}
        for state in STATES:
            table.add_column(state, justify="right", style=styles[state])
        for queue, by_state in self._table.items():
            table.add_row(queue, *(str(by_state[state]) if by_state[state] else "."
                                   for state in STATES))
        return table

    def start(self) -> None:
        self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                          transient=False)
        self._live.start()

    def say(self, line: str) -> None:
        self.console.print(f"[dim]{self.clock.stamp()}[/dim] {line}", markup=True,
                           highlight=False, soft_wrap=True)

    def update(self, table: dict[str, dict[str, int]], note: str) -> None:
        self._table, self._note = table, note
        if self._live is not None:
            self._live.update(self._render())

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None

    def print_lines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)


class PlainDisplay:
    """Not a terminal (CI, a pipe): plain lines; the counts when they change."""

    def __init__(self) -> None:
        self.clock = _Clock()
        self._lock = threading.Lock()
        self._last = ""

    def _print(self, line: str) -> None:
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def start(self) -> None:
        pass

    def say(self, line: str) -> None:
        self._print(f"{self.clock.stamp()} {line}")

    def update(self, table: dict[str, dict[str, int]], note: str) -> None:
        parts = []
        for queue, by_state in table.items():
            shown = " ".join(f"{state} {n}" for state, n in by_state.items() if n)
            parts.append(f"{queue}: {shown or '-'}")
        line = " | ".join(parts)
        if line != self._last:
            self._last = line
            self._print(f"{self.clock.stamp()} queues  {line}")

    def stop(self) -> None:
        pass

    def print_lines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self._print(line)


def make_display(console: Console) -> Display:
    """The live table on a terminal, plain lines otherwise."""
    if console.is_terminal:
        return LiveDisplay(console)
    return PlainDisplay()


__all__ = ["STATES", "Display", "LiveDisplay", "PlainDisplay", "make_display", "subtract"]
