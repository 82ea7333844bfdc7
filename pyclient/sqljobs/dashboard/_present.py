"""How the dashboard words and formats what it reads: durations, rates a person can
read, times, what a job's state means for that job, each attempt's outcome, and an
error record laid out as a traceback."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqljobs._client.introspection import AttemptRecord

# (unit, seconds per unit): a rate is shown in the first unit where it is at least 1
_UNITS = (("/s", 1.0), ("/min", 60.0), ("/h", 3600.0))


def age(seconds: float | None) -> str:
    """A duration: 350ms, 4.2s, 12m, 3.5h, 2.0d; '-' for none."""
    if seconds is None or seconds <= 0:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def per_unit(per_s: float) -> str:
    """The unit a rate reads best in: per second, per minute or per hour."""
    for unit, seconds in _UNITS[:-1]:
        if per_s * seconds >= 1:
            return unit
    return _UNITS[-1][0]


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}".removesuffix(".0")
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def rate(per_s: float | None, unit: str | None = None, suffix: bool = True) -> str:
    """A rate a person reads: 12/s, 3.5/min, 0.25/h (0 for none); `unit` forces one."""
    if not per_s:
        return "0"
    unit = unit or per_unit(per_s)
    value = per_s * dict(_UNITS)[unit]
    return _number(value) + (unit if suffix else "")


def as_time(value: Any) -> datetime | None:
    """A time from a record (a datetime, or ISO text from JSON); None for none or
    'infinity' (a parked job without a wake-up time)."""
    if value is None or value in ("infinity", "-infinity"):
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def actor(value: Any) -> str:
    """Who asked for a job: a string actor as is, an object as compact JSON ('' for none).
    The caller's word, not authentication."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(
        value, separators=(", ", ": "), sort_keys=True, ensure_ascii=False, default=str)


def when(value: Any) -> str:
    """A time as UTC text, to the second."""
    at = as_time(value)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if at else ""


def ago(value: Any, now: datetime | None) -> str:
    """How long before (or after) `now` a time is: '12s ago', 'in 4m'."""
    at = as_time(value)
    if at is None or now is None:
        return ""
    seconds = (now - at).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"{age(abs(seconds))} ago" if seconds > 0 else f"in {age(-seconds)}"


def seconds_between(start: Any, end: Any) -> float | None:
    begun, ended = as_time(start), as_time(end)
    if begun is None or ended is None:
        return None
    return (ended - begun).total_seconds()


# -- errors ---------------------------------------------------------------------------

_SHOWN = ("kind", "type", "message", "traceback", "attempt", "at")


def error_view(error: Any) -> dict[str, Any] | None:
    """An error record laid out for reading: the headline (kind, type, message), the
    traceback (or a text `detail`, a stack trace sent by another language) as its lines,
    and the other keys as JSON."""
    if error is None:
        return None
    if not isinstance(error, Mapping):
        return {"kind": "", "type": "", "message": str(error), "trace": None, "extra": None,
                "headline": str(error)}
    extra = {k: v for k, v in error.items() if k not in _SHOWN}
    trace = error.get("traceback")
    detail = extra.get("detail")
    if not trace and isinstance(detail, str) and "\n" in detail:
        trace = extra.pop("detail")
    message = str(error.get("message") or "")
    head = [str(error.get(k)) for k in ("kind", "type") if error.get(k)]
    return {"kind": str(error.get("kind") or ""), "type": str(error.get("type") or ""),
            "message": message, "trace": str(trace) if trace else None,
            "extra": json.dumps(extra, indent=2, sort_keys=True, default=str) if extra else None,
            "headline": (" · ".join(head) + ": " if head else "") + message}


def error_message(error: Any) -> str:
    """An error's message on one line (for a table cell)."""
    if error is None:
        return ""
    if isinstance(error, Mapping):
        return " ".join(str(error.get("message") or error.get("kind") or "").split())
    return " ".join(str(error).split())


# -- what a state means for this job --------------------------------------------------

def _attempts_word(n: int) -> str:
    return f"{n} attempt" + ("" if n == 1 else "s")


def state_label(job: Mapping[str, Any], attempts: Sequence[AttemptRecord],
                steps: Sequence[Mapping[str, Any]], waits: Sequence[Mapping[str, Any]],
                children: Sequence[Mapping[str, Any]], now: datetime | None) -> str:
    """One sentence saying what happened to the job and what comes next: built from
    its state, attempt, max_attempts, last error and attempt history."""
    state = str(job["state"])
    n, m = int(job["attempt"]), int(job["max_attempts"])
    raw = job.get("last_error")
    error: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    kind = str(error.get("kind") or "")
    last = attempts[-1] if attempts else None
    this_run = last if last is not None and last.claim == job.get("claim") else None
    unwind = next((s for s in steps if s.get("kind") == "unwind"), None)
    run_at = as_time(job.get("run_at"))
    due = ("as soon as a worker takes it" if run_at is None or now is None or run_at <= now
           else f"at {when(run_at)} UTC ({ago(run_at, now)})")
    if state == "ready":
        if unwind is not None:
            return ("ready: waits for a worker to finish unwinding its saga (its "
                    "compensations), then it settles "
                    f"{(unwind.get('value') or {}).get('state', 'failed')}")
        if n == 0:
            if attempts:
                return f"ready: requeued; attempt 1 of {m} runs {due}"
            return f"ready: waits for its first attempt (of {m}), {due}"
        if this_run is not None and this_run.outcome == "lease_expired":
            return (f"ready: attempt {n} of {m} was lost (the lease of worker "
                    f"{this_run.worker} expired); attempt {n + 1} runs {due}")
        if this_run is not None and this_run.outcome == "retry":
            return f"ready: attempt {n} of {m} failed; attempt {n + 1} runs {due}"
        return f"ready: attempt {n + 1} of {m} runs {due}"
    if state == "running":
        if unwind is not None:
            final = (unwind.get("value") or {}).get("state", "failed")
            return (f"running: unwinding its saga after attempt {n} of {m} failed "
                    f"(compensations run on worker {job.get('worker')}), then it settles {final}")
        since = as_time(job.get("started_at"))
        took = f" for {ago(since, now).removesuffix(' ago')}" if since and now else ""
        return f"running: attempt {n} of {m} on worker {job.get('worker')}{took}"
    if state == "parked":
        open_waits = [name for w in waits for name in (w.get("events") or [])]
        live = [c for c in children if c.get("state") in ("ready", "running", "parked",
                                                          "interrupted")]
        if open_waits:
            return "parked: waits for the event " + ", ".join(open_waits) + (
                f" (at the latest until {when(run_at)} UTC)" if run_at else "")
        if live:
            return f"parked: waits for {len(live)} child job(s) to finish"
        if run_at is not None:
            return f"parked: sleeps until {when(run_at)} UTC ({ago(run_at, now)})"
        return "parked: waits to be woken (an event, a child job or Run now)"
    if state == "succeeded":
        earlier = sum(1 for a in attempts if a.claim != job.get("claim"))
        if n <= 1 and earlier:  # requeued after attempts that did not succeed
            return (f"succeeded on attempt 1 of {m} after a requeue ({earlier} earlier "
                    f"attempt{'' if earlier == 1 else 's'} did not)")
        if n <= 1:
            return "succeeded on its first attempt"
        return f"succeeded on attempt {n} of {m}, after {n - 1} that did not"
    compensated = "; its saga's compensations ran" if error.get("compensated") else ""
    if state == "failed":
        if n == 0:
            return f"failed before any attempt ran: {error_message(error)}"
        # with dead-lettering on, running out of attempts ends dead: failed is terminal
        exhausted = n >= m and not job.get("dead_letter") and kind != "terminal"
        if kind == "lease_expired":
            return (f"failed: the lease of attempt {n} of {m}, its last, expired "
                    "(dead-lettering is off for this job)" + compensated)
        if exhausted:
            return (f"failed: retries exhausted after {n} of {m} attempts "
                    "(dead-lettering is off for this job)" + compensated)
        return (f"failed: terminal error on attempt {n} (of {m} allowed), not retried"
                + compensated)
    if state == "dead":
        lost = "; the last one's lease expired" if kind == "lease_expired" else ""
        if n >= m:
            return f"dead: retries exhausted after {n} of {m} attempts{lost}{compensated}"
        return f"dead after attempt {n} of {m}{lost}{compensated}"
    if state == "cancelled":
        if n == 0:
            return "cancelled before any attempt ran"
        return f"cancelled after {_attempts_word(n)} (of {m})" + compensated
    if state == "interrupted":
        worker = f" ({job.get('worker')})" if job.get("worker") else ""
        return (f"interrupted: a draining worker{worker} sent it back, not counted as an "
                f"attempt; attempt {n + 1} of {m} runs {due}")
    return state


def outcome_label(attempt: AttemptRecord, max_attempts: int) -> str:
    """What ended one attempt."""
    match attempt.outcome:
        case "retry":
            return "failed, retried"
        case "failed":
            kind = attempt.error.get("kind") if isinstance(attempt.error, Mapping) else None
            if kind == "terminal" or attempt.attempt < max_attempts:
                return "failed for good (terminal)"
            return "failed, no attempt left"
        case "dead":
            return "failed, no attempt left: dead-lettered"
        case "interrupted":
            return "interrupted by a drain (not counted)"
        case "lease_expired":
            return "lost: its lease expired"
        case "parked":
            return "parked (not counted)"
        case other:
            return other
