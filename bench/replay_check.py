"""What the replay divergence check costs per replayed step, in process (no database):
`python -m bench.replay_check [--steps 1000] [--repeats 100]`.

docs/howto-deploying.md quotes it. A job's stored history of `--steps` steps (and the
claim's `sqljobs.order`) is replayed through `Steps.run_async`, once with the check
(`sqljobs._runtime.replay.History` and `Steps._in_order`, as a worker runs it) and once
with both stubbed out (the replay before the check existed), interleaved `--repeats`
times so that a busy machine slows both alike. It prints the median and minimum
microseconds per replayed step of each, the median of the paired differences (the
check's cost), and `History.ask` + `skipped` alone. A replay makes no round trip: the
step runner fails the benchmark if it is ever called.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqljobs._runtime.replay import ORDER_KEY, History
from sqljobs._runtime.steps import Steps


async def no_round_trip(call: Any) -> Any:
    raise AssertionError("a replayed step made a round trip")


def never_runs():  # type: ignore[no-untyped-def]  # unannotated, like the docs' lambdas
    # (an annotated step function adds typing.get_type_hints per replayed step, to type
    # its stored value: a cost of its own, not the check's)
    raise AssertionError("a stored step ran again")


class Unchecked(Steps):
    """Steps without the divergence check: no History kept, no order checked."""

    async def _in_order(self, names: Sequence[str]) -> None:
        return None


class NoHistory(History):
    def ask(self, names: Iterable[str]) -> None:
        return None

    def skipped(self, name: str) -> str | None:
        return None


def stored_history(steps: int) -> dict[str, Any]:
    stored: dict[str, Any] = {f"s{i}": i for i in range(steps)}
    stored[ORDER_KEY] = [f"s{i}" for i in range(steps)]
    return stored


async def replay_us(checked: bool, steps: int) -> float:
    """Microseconds per step to replay a history of `steps` stored steps."""
    kind = Steps if checked else Unchecked
    runner = kind(job_id=1, claim=1, stored=stored_history(steps), started_at=None,
                  lease_s=None, run=no_round_trip, cancelled=threading.Event(),
                  lost=lambda: None, loop=asyncio.get_running_loop())
    if not checked:
        runner._history = NoHistory([])
    started = time.perf_counter()
    for i in range(steps):
        if await runner.run_async(f"s{i}", never_runs) != i:
            raise AssertionError("a replayed step answered another value")
    return (time.perf_counter() - started) / steps * 1e6


def history_alone_us(steps: int) -> float:
    history = History([f"s{i}" for i in range(steps)])
    started = time.perf_counter()
    for i in range(steps):
        name = f"s{i}"
        history.ask((name,))
        if history.skipped(name) is not None:
            raise AssertionError("an in-order replay diverged")
    return (time.perf_counter() - started) / steps * 1e6


async def measure(steps: int, repeats: int) -> None:
    checked: list[float] = []
    unchecked: list[float] = []
    alone: list[float] = []
    for _ in range(repeats):
        checked.append(await replay_us(True, steps))
        unchecked.append(await replay_us(False, steps))
        alone.append(history_alone_us(steps))
    differences = [a - b for a, b in zip(checked, unchecked, strict=True)]
    print(f"{steps} stored steps replayed, {repeats} interleaved repeats (us per step)")
    for label, values in (("replay, checked", checked), ("replay, unchecked", unchecked),
                          ("History.ask + skipped alone", alone)):
        print(f"  {label:29s} median {statistics.median(values):6.3f}   "
              f"min {min(values):6.3f}")
    print(f"  {'the check (paired difference)':29s} median {statistics.median(differences):6.3f}"
          f"   min {min(checked) - min(unchecked):6.3f} (min - min)")
    print("  round trips: 0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=100)
    arguments = parser.parse_args()
    asyncio.run(measure(arguments.steps, arguments.repeats))


if __name__ == "__main__":
    main()
