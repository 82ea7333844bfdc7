"""Why a run stops early, and what a stopped run raises.

A run is stopped when its lease is lost (or the job was cancelled), its timeout
passes, or a drain cuts it off. The worker sets the run's `ctx.cancelled`; durable
steps and `ctx.raise_if_cancelled()` then raise `RunCancelled`.
"""

from __future__ import annotations

from typing import Literal

from sqljobs._client.errors import public_name

StopReason = Literal["lease_lost", "timeout", "interrupt"]


class RunCancelled(Exception):
    """Raised once the run has been told to stop (`ctx.raise_if_cancelled()`, a step)."""


__all__ = ["RunCancelled", "StopReason"]

public_name(RunCancelled)
