"""Prefetch: how many claimed jobs a worker holds beyond the ones it runs.

`prefetch=N` holds at most N waiting jobs. The default, auto, sizes the local queue by
Little's law: the jobs the worker's slots get through during one claim's round trip,
twice over (so that the next claim is in flight while the last one's jobs run), at
least 1 and at most `AUTO_CEILING`:

    prefetch = 2 x concurrency x claim round trip / mean run time

Short jobs in volume get large claims (a no-op job: the ceiling, twice the largest
claim, so that each claim is a full one), which is what drains a backlog fast; long
jobs get one waiting job per worker, so a fleet does not hoard them while other workers
idle (a 1 s job, 10 slots, a 5 ms claim: 2 x 10 x 0.005 / 1 = 0.1, so 1). Both times
are moving averages over the recent claims and runs, so the size follows the work as it
changes; until the first runs end it is `concurrency`.
"""

from __future__ import annotations

import math

# Twice the largest claim (jobs.claim takes at most 1,000): a claim waits for half the
# room (claiming.py), so at the ceiling every claim is a full one, made while a full
# claim's jobs run. At 500 the claims of a backlog of short jobs were of 255-500, and
# the drain 12-26% slower (docs/design/engine-hot-path.md, "Claims of a thousand").
AUTO_CEILING = 2000
_WEIGHT = 0.2  # of the newest sample in each moving average


class Prefetch:
    """The worker's prefetch: fixed, or auto (see the module docstring)."""

    def __init__(self, fixed: int | None, concurrency: int) -> None:
        self.auto = fixed is None
        self.concurrency = concurrency
        self.value = concurrency if fixed is None else fixed
        self._claim_s: float | None = None
        self._run_s: float | None = None

    def __str__(self) -> str:
        return f"auto (now {self.value})" if self.auto else str(self.value)

    def claimed(self, seconds: float) -> None:
        """A claim took `seconds`, round trip; the auto size is worked out again."""
        self._claim_s = _average(self._claim_s, seconds)
        if self.auto and self._run_s is not None:
            wanted = 2 * self.concurrency * self._claim_s / max(self._run_s, 1e-6)
            self.value = max(1, min(AUTO_CEILING, math.ceil(wanted)))

    def ran(self, seconds: float) -> None:
        """A run held its slot for `seconds`."""
        self._run_s = _average(self._run_s, seconds)


def _average(mean: float | None, sample: float) -> float:
    return sample if mean is None else mean + _WEIGHT * (sample - mean)


__all__ = ["AUTO_CEILING", "Prefetch"]
