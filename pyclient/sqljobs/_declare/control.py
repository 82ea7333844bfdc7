"""Exceptions a handler raises to tell the worker what to do with its job.

    raise Retry(in_=30)     # this attempt failed: run again in 30 s (counts as an attempt)
    raise Snooze(60)        # not now: put the job back for 60 s (NOT an attempt)

Any other exception is retried by the job's retry policy (the backoff is computed in
SQL), unless its type is declared `terminal=` on the job, which fails the job at once.
"""

from __future__ import annotations

from datetime import timedelta

from sqljobs._client.errors import public_name


def _seconds(value: float | timedelta) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0:  # also refuses NaN
        raise ValueError(f"a delay must be zero or more seconds, got {value!r}")
    return seconds


class Retry(Exception):
    """Fail this attempt and run the job again after `in_` seconds (an attempt is counted;
    when attempts are exhausted the job is dead-lettered like any other failure)."""

    def __init__(self, in_: float | timedelta = 0.0, reason: str = "") -> None:
        self.delay_s = _seconds(in_)
        self.reason = reason
        super().__init__(reason or f"retry requested in {self.delay_s:g} s")


class Snooze(Exception):
    """Put the job back, uncounted, to run again after `seconds` (e.g. a downstream
    service said "later"). The attempt is not counted and last_error is not touched."""

    def __init__(self, seconds: float | timedelta = 0.0) -> None:
        self.delay_s = _seconds(seconds)
        super().__init__(f"snoozed for {self.delay_s:g} s")

public_name(Retry)
public_name(Snooze)
