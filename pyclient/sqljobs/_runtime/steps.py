"""Durable steps: `ctx.step`, for async and sync handlers alike.

    @app.job(queue="orders")
    async def fulfil(ctx: JobContext, order: Order) -> None:
        charge = await ctx.step.run_async("charge", lambda: psp.charge(order))
        await ctx.step.sleep_async("cool-off", 3600)
        paid = await ctx.step.wait_for_event_async("paid", event="invoice.paid",
                                                   match={"order": order.id}, timeout=86400)
        ...

    @app.job(queue="orders")
    def fulfil_sync(ctx: JobContext, order: Order) -> None:
        charge = ctx.step.run("charge", lambda: psp.charge(order))   # blocking
        ...

The naming rule is the package's: the blocking form has the plain name, the asyncio
form adds `_async` (docs/reference/python.md). Both forms are one implementation: a
blocking call runs the same coroutine on the worker's loop and waits for it, and a sync
step's function is called in the handler's own thread.

Each step's outcome is stored in the database (`jobs.step_put`, fenced on the run's
claim, one round trip) BEFORE the call returns, and the call returns exactly what was
stored: the JSON round trip of the value (validated into the step's type when it has
one: `result_type=`, or the function's return annotation). When the job runs again —
a retry, a wake-up after a sleep or an event, a crashed worker's job — the claim hands
back every stored step, so those calls return the stored value at once, with no round
trip and without running the function again. Only steps never stored run.

Rules:
  * step names are unique within a run: reusing one raises `StepNameReused`;
  * a step's function may run more than once (a crash after it ran but before its
    value was stored re-runs it): make its effects idempotent, e.g. keyed by
    `ctx.job_id` and the step name;
  * once the run lost its lease or was cancelled nothing more is stored: the call
    raises `LeaseLost` (SJ004) or `RunCancelled` and the worker stops the run;
  * no step function starts once the lease ran out on this worker's clock (a stall
    longer than the lease: another worker may hold the job and have stored the step):
    the step raises `RunCancelled` and the worker stops the run;
  * a step's store that fails on a dropped connection is sent again on a live one (up
    to 3 times; it is fenced and idempotent), so a failover does not cost an attempt;
  * a sleep or an event wait that has to wait parks the job (not an attempt) and ends
    the run at once, freeing the worker's slot (it raises `Suspended`, a BaseException
    the worker handles: don't catch it); the job resumes, replaying, when it is due.

Observers (sqljobs._runtime.observing; tracing makes spans of it) see each step that
works in this run as `watch.step(name, kind)` (kind run, sleep, wait, invoke,
compensate), and a park or a replayed step as `watch.event("parked" | "replayed", ...)`
with the step's name and kind, never its value. A step's function runs in the step's
context (a copy), for sync handlers too, so what it traces nests under the step.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import queue
import random
import threading
import time
import typing
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar, overload

import psycopg
from pydantic import TypeAdapter

from sqljobs._client import queries
from sqljobs._client.encoding import json_result
from sqljobs._client.errors import LeaseLost, SqljobsError
from sqljobs._client.producing import producing
from sqljobs._client.queries import Call
from sqljobs._client.records import JobSpec, JobState
from sqljobs._client.results import JobCancelled, JobDead, JobError, JobFailed
from sqljobs._declare.jobs import JobHandle, RetryPolicy
from sqljobs._runtime.observing import NO_WATCH, RunWatch
from sqljobs._runtime.replay import ORDER_KEY, History, ReplayDiverged
from sqljobs._runtime.stopping import RunCancelled, StopReason

T = TypeVar("T")
RunCall = Callable[[Call[Any]], Awaitable[Any]]
# How a step's function is called: (fn, timeout) -> its value. The async form awaits it
# (or runs a plain function in a thread); the blocking form calls it in the handler's.
Caller = Callable[[Callable[[], Any], float | None], Awaitable[Any]]

# Step names the runtime keeps for itself (the SQL refuses them from callers with
# reserved_step_name, SJ011): a saga's unwind record and its compensations' records.
UNWIND_STEP = "sqljobs.unwind"
UNDO_PREFIX = "sqljobs.undo:"
PATCH_PREFIX = "sqljobs.patch:"  # a patch marker's stored answer (ctx.patched)

# What a step runs inside when no observer watches the run (stateless, so shared).
_UNWATCHED = contextlib.nullcontext()

# How often a wait registration is retried after a deadlock with an emitting
# transaction (see sql/60_events.sql, "Locks").
_DEADLOCK_RETRIES = 3


class Suspended(BaseException):
    """A step parked the job (a sleep or a wait); the run ends here without settling.

    A BaseException so that a handler's `except Exception` does not swallow it; the
    worker catches it and frees the slot. The job resumes, replaying, when due.
    """


class Unwinding(BaseException):
    """The job is unwinding (a saga): a step that was never stored does not run; the
    worker runs the compensations of the stored steps instead (a BaseException: don't
    catch it)."""


class StepNameReused(SqljobsError, ValueError):
    """Two steps of one run were given the same name."""


class StepTimeout(SqljobsError, TimeoutError):
    """A step's function ran longer than its `timeout`."""


class EventTimeout(SqljobsError, TimeoutError):
    """An event wait declared `raise_on_timeout=True` timed out (recorded durably)."""


@dataclass(frozen=True)
class SagaEnd:
    """`Steps.conclude`'s answer: settle the run as any other (`settle`); it was settled
    already (`settled`); nothing more may be written (`lost`); the drain cut the unwind
    off (`interrupted`); a compensation raised `error` (`compensation_failed`); every
    compensation ran and the job settled (`compensated`)."""

    kind: Literal["settle", "settled", "lost", "interrupted", "compensation_failed",
                  "compensated"]
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An event a wait received: its name, payload and id."""

    name: str
    payload: dict[str, Any]
    id: int


EventSpec = str | tuple[str, Mapping[str, Any]]


def _specs(events: Sequence[EventSpec]) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    for spec in events:
        if isinstance(spec, str):
            specs.append({"event": spec, "match": {}})
        else:
            name, match = spec
            specs.append({"event": name, "match": dict(match)})
    if not specs:
        raise ValueError("wait for at least one event")
    return specs


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _backoff(policy: RetryPolicy, failures: int) -> float:
    """jobs.backoff_s's curve (sql/40_settle.sql), for a step's tries within one run: in
    process, with no round trip. tests/test_steps.py holds the two to one curve."""
    base = policy.base_s or 1.0  # (unset only when the job's own policy is unknown)
    cap = policy.cap_s or base
    delay = min(cap, base * 2 ** min(failures - 1, 60))
    if policy.jitter == "full":
        return float(random.uniform(0, delay))
    if policy.jitter == "equal":
        return float(delay / 2 + random.uniform(0, delay / 2))
    return float(delay)


@functools.lru_cache(maxsize=512)
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _declared_type(fn: Callable[..., Any]) -> Any:
    """The return annotation of fn (unwrapping Awaitable/Coroutine), or None. Read once
    per function: `typing.get_type_hints` evaluates the annotations on every call, which
    made a replayed step of an annotated function several times slower than the rest of
    its replay."""
    try:
        return _declared_type_cached(fn)
    except TypeError:  # an unhashable callable: read it every time
        return _read_declared_type(fn)


@functools.lru_cache(maxsize=1024)
def _declared_type_cached(fn: Callable[..., Any]) -> Any:
    return _read_declared_type(fn)


def _read_declared_type(fn: Callable[..., Any]) -> Any:
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:
        return None
    if hint is None or hint is Any or hint is type(None):
        return None
    origin = typing.get_origin(hint)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Awaitable):
        args = typing.get_args(hint)
        hint = args[-1] if args else None
        if hint is Any or hint is type(None):
            return None
    return hint


class Steps:
    """The durable steps of one run: `ctx.step`. Each step has an asyncio form
    (`run_async`, `sleep_async`, ...) and a blocking one (`run`, `sleep`, ...)."""

    def __init__(
        self,
        *,
        job_id: int,
        claim: int,
        stored: Mapping[str, Any] | None,
        started_at: datetime | None,
        lease_s: float | None,
        run: RunCall,
        cancelled: threading.Event,
        lost: Callable[[], None],
        loop: asyncio.AbstractEventLoop,
        job_retry: RetryPolicy | None = None,
        lease_deadline: Callable[[], float] | None = None,
        watch: RunWatch = NO_WATCH,
    ) -> None:
        self.job_id = job_id
        self.claim = claim
        self._stored: dict[str, Any] = dict(stored or {})
        # the order the stored steps were written in: a replay is checked against it
        self._history = History(self._stored.pop(ORDER_KEY, None) or [])
        self._used: set[str] = set()
        self._started_at = started_at or datetime.now(UTC)
        self._started_mono = time.monotonic()
        self._lease_s = lease_s
        self._run = run
        self._cancelled = cancelled
        self._lost = lost
        self._lease_deadline = lease_deadline  # monotonic; renewed by the heartbeats
        self.loop = loop
        self._job_retry = job_retry or RetryPolicy()  # a step's retry falls back on it
        self.watch = watch  # observers' view of the run (steps as spans, parks as events)
        self.round_trips = 0  # statements this run's steps sent (for tests and benchmarks)
        # (step name, compensation, the step's value) of completed compensable steps, in
        # the order the handler reached them (sagas).
        self._compensations: list[tuple[str, Callable[[Any], Any], Any]] = []

    # -- bookkeeping ------------------------------------------------------------------

    def _watching(self, name: str, kind: str) -> contextlib.AbstractContextManager[None]:
        """The observers' view of one step as it runs (a span, with tracing); with no
        observer, a shared no-op (a step pays one identity test)."""
        return _UNWATCHED if self.watch is NO_WATCH else self.watch.step(name, kind)

    @property
    def stored(self) -> dict[str, Any]:
        """The steps stored so far: name -> stored value (a copy)."""
        return dict(self._stored)

    @property
    def unwinding(self) -> bool:
        """The job is unwinding its saga: stored steps replay, no new step runs."""
        return UNWIND_STEP in self._stored

    @property
    def has_compensations(self) -> bool:
        return bool(self._compensations)

    def reopen(self) -> None:
        """Let the worker store steps after the handler was stopped by its timeout (to
        run a saga's compensations); the SQL fence still refuses a lost or cancelled job."""
        self._cancelled = threading.Event()

    def now(self) -> datetime:
        """The database clock, as of the claim plus the time since (no round trip)."""
        return self._started_at + timedelta(seconds=time.monotonic() - self._started_mono)

    def _begin(self, name: str) -> tuple[bool, Any]:
        """Refuse a reused name or a stopped run; answers (stored?, stored value)."""
        if not isinstance(name, str) or not name:
            raise ValueError("a step needs a non-empty name")
        if name in self._used:
            raise StepNameReused(
                f"step {name!r} was already used in this run of job {self.job_id}; "
                f"give every step of a job its own name (e.g. f'charge-{{i}}' in loops)")
        self._used.add(name)
        self._history.ask((name,))
        if name in self._stored:
            return True, self._stored[name]
        if self.unwinding:
            raise Unwinding(f"job {self.job_id} is unwinding: step {name!r} does not run")
        self._check_running()
        return False, None

    async def _in_order(self, names: Sequence[str]) -> None:
        """Raise ReplayDiverged, before the step runs, when the code asks for these steps
        out of the stored history's order (sqljobs._runtime.replay). Steps started
        together ask in any order: one that finds a step skipped lets the loop run the
        others once before it decides. An unwinding saga replays as it can."""
        if self.unwinding or self._first_skipped(names) is None:
            return
        await asyncio.sleep(0)
        found = self._first_skipped(names)
        if found is not None:
            name, skipped = found
            raise ReplayDiverged.of(self.job_id, name, skipped, stored=name in self._stored)

    def _first_skipped(self, names: Sequence[str]) -> tuple[str, str] | None:
        for name in names:
            skipped = self._history.skipped(name)
            if skipped is not None:
                return name, skipped
        return None

    def _check_running(self) -> None:
        if self._cancelled.is_set():
            raise RunCancelled(f"job {self.job_id}: the run was stopped; no more steps are stored")
        if self._lease_deadline is not None and time.monotonic() > self._lease_deadline():
            # Past the lease on this process's clock (it stalled, or its heartbeats
            # failed): another worker may hold the job. Stop before the step's function
            # runs, not after the fence refuses to store what it did.
            self._stop_lost()
            raise RunCancelled(f"job {self.job_id}: the lease ran out on this worker's clock "
                               f"(a stall longer than the lease?); no more steps run")

    def _stop_lost(self) -> None:
        """Stop the run as lost, at once when on the worker's loop (so that its outcome
        is never written), else as soon as the loop runs."""
        self._cancelled.set()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._lost()
        else:
            self.loop.call_soon_threadsafe(self._lost)

    async def _call(self, call: Call[T]) -> T:
        self._check_running()
        self.round_trips += 1
        try:
            result: T = await self._run(call)
        except LeaseLost:
            self._lost()
            raise
        return result

    @staticmethod
    def _typed(value: Any, fn: Callable[..., Any] | None, result_type: Any) -> Any:
        tp = result_type if result_type is not None else (
            _declared_type(fn) if fn is not None else None)
        if tp is None:
            return value
        return _adapter(tp).validate_python(value)

    async def _put(self, name: str, value: Any, options: Mapping[str, bool] | None = None,
                   ) -> Any:
        stored = await self._call(queries.step_put(
            self.job_id, self.claim, name, json_result(value), self._lease_s, options))
        self._stored[name] = stored
        return stored

    # -- the two faces ----------------------------------------------------------------

    def _blocking(self, make: Callable[[Caller], Coroutine[Any, Any, T]]) -> T:
        """Run a step's coroutine on the worker's loop from a sync handler's thread and
        wait for it. What the coroutine asks this thread to call (a step's function)
        is called here, in the handler's thread; no other thread is started."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError("on the event loop, use `await ctx.step.<name>_async(...)`")
        inbox: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue())
        loop = self.loop

        async def in_this_thread(fn: Callable[[], Any], timeout: float | None) -> Any:
            reply: asyncio.Future[Any] = loop.create_future()
            # The function runs in this step's context (as an async step's does), so
            # what it traces nests under the step's span.
            inbox.put((functools.partial(contextvars.copy_context().run, fn), reply))
            try:
                return await asyncio.wait_for(asyncio.shield(reply), timeout)
            except TimeoutError:
                # The function cannot be interrupted: it ends in its own time and what it
                # answers then is dropped.
                raise StepTimeout(f"step function ran longer than {timeout:g} s") from None

        future: Future[T] = asyncio.run_coroutine_threadsafe(make(in_this_thread), loop)
        future.add_done_callback(lambda _: inbox.put(None))
        while (item := inbox.get()) is not None:
            fn, reply = item
            try:
                value = fn()
            except Exception as error:
                loop.call_soon_threadsafe(_settle, reply, None, error)
            else:
                loop.call_soon_threadsafe(_settle, reply, value, None)
        return future.result()

    # -- run --------------------------------------------------------------------------

    @overload
    async def run_async(self, name: str, fn: Callable[[], Awaitable[T]], *,
                        timeout: float | None = ..., retry: RetryPolicy | None = ...,
                        compensate: Callable[[Any], Any] | None = ...,
                        result_type: Any = ...) -> T: ...

    @overload
    async def run_async(self, name: str, fn: Callable[[], T], *, timeout: float | None = ...,
                        retry: RetryPolicy | None = ...,
                        compensate: Callable[[Any], Any] | None = ...,
                        result_type: Any = ...) -> T: ...

    async def run_async(self, name: str, fn: Callable[[], Any], *,
                        timeout: float | None = None, retry: RetryPolicy | None = None,
                        compensate: Callable[[Any], Any] | None = None,
                        result_type: Any = None) -> Any:
        """Run step `name` once: its stored value when it has one, else `fn()` (a
        coroutine function, or a plain function run in a thread), stored and returned.

        `timeout` (seconds) bounds each try (StepTimeout); `retry` retries a failing try
        in this run (exponential backoff; fields left None take the job's policy) before
        the error fails the attempt of the job. `compensate(value)` undoes the step (a
        saga): when the job fails for good or is cancelled, the compensations of its
        completed steps run in reverse order.
        """
        return await self._run_step(name, fn, timeout, retry, compensate, result_type,
                                    self._try)

    def run(self, name: str, fn: Callable[[], T], *, timeout: float | None = None,
            retry: RetryPolicy | None = None, compensate: Callable[[Any], Any] | None = None,
            result_type: Any = None) -> T:
        """`run_async`, blocking, for sync handlers: `fn` is called in this thread. Past
        its `timeout` a try counts as timed out and what `fn` answers later is dropped
        (a thread cannot be interrupted; none is left running)."""
        value: T = self._blocking(lambda call: self._run_step(
            name, fn, timeout, retry, compensate, result_type, call))
        return value

    async def _run_step(self, name: str, fn: Callable[[], Any], timeout: float | None,
                        retry: RetryPolicy | None, compensate: Callable[[Any], Any] | None,
                        result_type: Any, call: Caller) -> Any:
        done, value = self._begin(name)
        await self._in_order((name,))
        if done:
            self.watch.event("replayed", {"step.name": name, "step.kind": "run"})
        else:
            with self._watching(name, "run"):
                policy = None if retry is None else retry.over(self._job_retry)
                failures = 0
                while True:
                    self._check_running()
                    try:
                        result = await call(fn, timeout)
                    except Exception:
                        failures += 1
                        if policy is None or failures >= (policy.max_attempts or 1):
                            raise
                        await asyncio.sleep(_backoff(policy, failures))
                        continue
                    break
                options = {"compensable": True} if compensate is not None else None
                value = await self._put(name, result, options)
        typed = self._typed(value, fn, result_type)
        if compensate is not None:
            self._compensations.append((name, compensate, typed))
        return typed

    async def _try(self, fn: Callable[[], Any], timeout: float | None) -> Any:
        if inspect.iscoroutinefunction(fn):
            awaitable: Awaitable[Any] = fn()
        else:
            awaitable = asyncio.to_thread(fn)
        try:
            result = await asyncio.wait_for(awaitable, timeout)
        except TimeoutError:
            raise StepTimeout(f"step function ran longer than {timeout:g} s") from None
        if inspect.isawaitable(result):  # a lambda returning a coroutine
            result = await asyncio.wait_for(result, timeout)
        return result

    # -- sagas ------------------------------------------------------------------------

    async def unwind(self) -> None:
        """Run the compensations of the completed compensable steps in reverse order,
        each stored as step 'sqljobs.undo:<name>' (a finished one never runs again), then
        settle the job in the final state its unwind recorded (jobs.step_unwound).

        Called by the worker once the job is unwinding: its settle answered `running`
        (the engine recorded the unwind; sql/40_settle.sql), or it was claimed already
        unwinding (cancelled, or resumed after a crash)."""
        for name, undo, value in reversed(self._compensations):
            if UNDO_PREFIX + name in self._stored:
                continue
            self._check_running()
            with self._watching(UNDO_PREFIX + name, "compensate"):
                result = await self._try(functools.partial(undo, value), None)
                self._stored[UNDO_PREFIX + name] = await self._call(queries.step_put(
                    self.job_id, self.claim, name, json_result(result), self._lease_s,
                    {"undo": True}))
        await self._call(queries.step_unwound(self.job_id, self.claim))

    def began_unwinding(self) -> None:
        """The engine started this job's unwind (its settle answered `running`)."""
        self._stored.setdefault(UNWIND_STEP, None)

    async def conclude(self, *, succeeded: bool, stop_reason: StopReason | None,
                       fail_attempt: Callable[[], Awaitable[JobState | None]]) -> SagaEnd:
        """What the end of a run means for its saga (docs/design/sagas.md), decided here
        whole; the worker only writes what it answers.

        A run with no compensable step, or stopped for a lost lease or a drain, or a
        success that is not unwinding: `settle`, as any run. A failure of a run with
        compensable steps settles at once through `fail_attempt` (the engine decides by
        jobs.retry_state whether the failure is final, and answers the job's state, or
        None when the lease was lost): not final, it was written (`settled`); final, the
        engine started the unwind (the job stays `running`), and the compensations run
        in reverse order here (`compensated` once the job settled in its recorded final
        state). A job claimed already unwinding goes straight to its compensations. A
        compensation that fails leaves the job compensating (`compensation_failed`: it
        is tried again later, not as an attempt)."""
        if not (self.unwinding or self.has_compensations):
            return SagaEnd("settle")
        if stop_reason in ("lease_lost", "interrupt"):
            return SagaEnd("settle")
        if not self.unwinding:
            if succeeded:
                return SagaEnd("settle")
            state = await fail_attempt()
            if state is None:
                return SagaEnd("lost")
            if state is not JobState.RUNNING:
                return SagaEnd("settled")  # not final: retried as the engine settled it
            self.began_unwinding()
        if stop_reason == "timeout":
            self.reopen()  # the handler was stopped; its compensations must still run
        try:
            await self.unwind()
        except (LeaseLost, RunCancelled):
            return SagaEnd("interrupted" if stop_reason == "interrupt" else "lost")
        except Exception as error:
            return SagaEnd("compensation_failed", error)
        return SagaEnd("compensated")


    # -- sleep ------------------------------------------------------------------------

    async def sleep_async(self, name: str, duration: float | timedelta) -> None:
        """Sleep `duration` (seconds or timedelta), measured on the database clock.

        The first call stores the wake-up time and parks the job (Suspended: the run
        ends, its slot frees, the attempt is not counted); the job resumes at that time,
        replays, and this call then returns.
        """
        await self._sleep(name, None, _seconds(duration))

    async def sleep_until_async(self, name: str, when: datetime) -> None:
        """Sleep until `when` (timezone-aware), on the database clock."""
        if when.tzinfo is None:
            raise ValueError("sleep_until needs a timezone-aware datetime")
        await self._sleep(name, when, None)

    async def _sleep(self, name: str, until: datetime | None, delay_s: float | None) -> None:
        if delay_s is not None and delay_s < 0:
            raise ValueError("a sleep cannot be negative")
        done, value = self._begin(name)
        await self._in_order((name,))
        if done and (self.unwinding or datetime.fromisoformat(value["until"]) <= self.now()):
            self.watch.event("replayed", {"step.name": name, "step.kind": "sleep"})
            return
        self._check_running()
        with self._watching(name, "sleep"):
            answer = await self._call(queries.step_sleep(self.job_id, self.claim, name, until,
                                                         delay_s))
        self._stored[name] = {"until": answer.wake_at.isoformat()}
        if answer.parked:
            self.watch.event("parked", {"step.name": name, "step.kind": "sleep",
                                        "wake_at": answer.wake_at.isoformat()})
            raise Suspended(f"job {self.job_id} sleeps until {answer.wake_at.isoformat()}")

    # -- events -----------------------------------------------------------------------

    async def wait_for_event_async(self, name: str, event: str,
                             match: Mapping[str, Any] | None = None, *,
                             timeout: float | timedelta | None = None,
                             raise_on_timeout: bool = False) -> dict[str, Any] | None:
        """Wait for an event named `event` whose payload contains `match`; answers its
        payload, or None when `timeout` passed first (EventTimeout if raise_on_timeout).

        An event emitted since the job first started counts, even before this call.
        Waiting parks the job (Suspended); the emit wakes it at once.
        """
        received = await self.wait_for_any_async(name, [(event, match or {})], timeout=timeout,
                                                 raise_on_timeout=raise_on_timeout)
        return None if received is None else received.payload

    async def wait_for_any_async(self, name: str, events: Sequence[EventSpec], *,
                           timeout: float | timedelta | None = None,
                           raise_on_timeout: bool = False) -> Event | None:
        """Wait for the first of several events: each an event name, or (name, match).
        Answers the Event that came first, or None on timeout."""
        specs = _specs(events)
        done, value = self._begin(name)
        await self._in_order((name,))
        if done:
            self.watch.event("replayed", {"step.name": name, "step.kind": "wait"})
        else:
            timeout_s = None if timeout is None else _seconds(timeout)
            with self._watching(name, "wait"):
                for tries in range(_DEADLOCK_RETRIES + 1):
                    try:
                        answer = await self._call(queries.step_wait(
                            self.job_id, self.claim, name, specs, timeout_s, self._lease_s))
                        break
                    except psycopg.errors.DeadlockDetected:
                        if tries == _DEADLOCK_RETRIES:
                            raise
            if answer.parked:
                # event names only: a match's values may come from the payload
                self.watch.event("parked", {"step.name": name, "step.kind": "wait",
                                            "events": [s["event"] for s in specs]})
                raise Suspended(f"job {self.job_id} waits for {[s['event'] for s in specs]}")
            value = answer.value
            self._stored[name] = value
        if value.get("timeout"):
            if raise_on_timeout:
                raise EventTimeout(f"step {name!r}: no matching event before the timeout")
            return None
        return Event(name=value["event"], payload=value["payload"], id=value["id"])


    # -- child jobs -------------------------------------------------------------------

    async def invoke_async(self, name: str, job: JobHandle[Any] | str, payload: Any = None, *,
                     key: str | None = None, **options: Any) -> Any:
        """Run another job as step `name` and answer its result.

        The child is enqueued once (its key defaults to "<this job id>:<step name>"), and
        this job parks (Suspended; its slot frees) until the child settles, then replays
        and answers the child's result, or raises JobFailed / JobDead / JobCancelled with
        the child's error. `job` is a JobHandle (payload validated, its declared queue and
        policy) or a job name; `options` are JobHandle.spec's (queue, priority, tenant...).
        """
        return (await self._invoke(name, [name], job, [payload], [key], options))[0]

    async def invoke_many_async(self, name: str, job: JobHandle[Any] | str, payloads: Sequence[Any],
                          *, keys: Sequence[str] | None = None, **options: Any) -> list[Any]:
        """Fan out: one child per payload (steps "name[0]", "name[1]", ...), enqueued in
        one statement; answers every result, in order, once all settled (raises the first
        failed child's error, in order)."""
        if keys is not None and len(keys) != len(payloads):
            raise ValueError("give one key per payload")
        names = [f"{name}[{i}]" for i in range(len(payloads))]
        return await self._invoke(name, names, job, list(payloads),
                                  list(keys) if keys is not None else [None] * len(payloads),
                                  options)

    async def _invoke(self, name: str, names: list[str], job: JobHandle[Any] | str,
                      payloads: list[Any], keys: list[str | None],
                      options: Mapping[str, Any]) -> list[Any]:
        outcomes: dict[str, Any] = {}
        pending: list[str] = []
        for step_name in names:
            done, value = self._begin(step_name)
            if done:
                outcomes[step_name] = value
            else:
                pending.append(step_name)
        await self._in_order(names)
        if len(pending) < len(names):
            self.watch.event("replayed", {"step.name": name, "step.kind": "invoke",
                                          "children": len(names) - len(pending)})
        if pending:
            specs = []
            for step_name, payload, key in zip(names, payloads, keys, strict=True):
                if step_name not in pending:
                    continue
                child_key = key or f"{self.job_id}:{step_name}"
                if isinstance(job, JobHandle):
                    specs.append(job.spec(payload, key=child_key, **options))
                else:
                    specs.append(JobSpec(name=job, key=child_key,
                                         payload=payload if payload is not None else {},
                                         **options))
            with self._watching(name, "invoke"), producing("invoke", specs) as sending:
                answers = await self._call(queries.step_invoke(
                    self.job_id, self.claim, pending, sending.specs, self._lease_s))
                sending.enqueued([a.child_id for a in answers if a.child_id is not None])
            if any(a.parked for a in answers):
                self.watch.event("parked", {"step.name": name, "step.kind": "invoke",
                                            "children": sum(a.value is None for a in answers)})
                raise Suspended(f"job {self.job_id} awaits child jobs "
                                f"{[a.child_id for a in answers if a.value is None]}")
            for answer in answers:
                self._stored[answer.name] = outcomes[answer.name] = answer.value
        return [_child_result(outcomes[step_name]) for step_name in names]


    # -- patch markers ----------------------------------------------------------------

    async def patched_async(self, patch_id: str) -> bool:
        """Whether this run takes the patched branch of a code change (`ctx.patched`):
        True on a first run, or on a replay that reaches this point for the first time;
        False on a replay whose stored history went past this point without the marker
        (the code before the patch ran here). The answer is stored (one round trip, the
        first time), so every later replay answers the same."""
        if not isinstance(patch_id, str) or not patch_id:
            raise ValueError("a patch needs a non-empty id")
        name = PATCH_PREFIX + patch_id
        if name in self._stored:
            return bool(self._stored[name])
        fresh = not self._history.passed
        if self.unwinding:
            return fresh
        stored = await self._call(queries.step_put(
            self.job_id, self.claim, patch_id, fresh, self._lease_s, {"patch": True}))
        self._stored[name] = stored
        return bool(stored)

    def patched(self, patch_id: str) -> bool:
        """`patched_async`, blocking."""
        return self._blocking(lambda _: self.patched_async(patch_id))

    def deprecate_patch(self, patch_id: str) -> None:
        """The cleanup release of a patch: the code keeps only the patched branch. A job
        whose history took the branch before the patch cannot replay on it: that raises
        ReplayDiverged (fork it, or let it finish on the previous release). No round trip."""
        if self._stored.get(PATCH_PREFIX + patch_id) is False:
            raise ReplayDiverged(
                f"job {self.job_id}: its history took the branch before patch {patch_id!r}, "
                f"which this code deprecated; run it on the release that still has both "
                f"branches, or fork it (docs/howto-deploying.md)")

    # -- the blocking forms of the waits (sync handlers) ------------------------------

    def sleep(self, name: str, duration: float | timedelta) -> None:
        """`sleep_async`, blocking."""
        self._blocking(lambda _: self.sleep_async(name, duration))

    def sleep_until(self, name: str, when: datetime) -> None:
        """`sleep_until_async`, blocking."""
        self._blocking(lambda _: self.sleep_until_async(name, when))

    def wait_for_event(self, name: str, event: str, match: Mapping[str, Any] | None = None, *,
                       timeout: float | timedelta | None = None,
                       raise_on_timeout: bool = False) -> dict[str, Any] | None:
        """`wait_for_event_async`, blocking."""
        return self._blocking(lambda _: self.wait_for_event_async(
            name, event, match, timeout=timeout, raise_on_timeout=raise_on_timeout))

    def wait_for_any(self, name: str, events: Sequence[EventSpec], *,
                     timeout: float | timedelta | None = None,
                     raise_on_timeout: bool = False) -> Event | None:
        """`wait_for_any_async`, blocking."""
        return self._blocking(lambda _: self.wait_for_any_async(
            name, events, timeout=timeout, raise_on_timeout=raise_on_timeout))

    def invoke(self, name: str, job: JobHandle[Any] | str, payload: Any = None, *,
               key: str | None = None, **options: Any) -> Any:
        """`invoke_async`, blocking."""
        return self._blocking(lambda _: self.invoke_async(name, job, payload, key=key,
                                                          **options))

    def invoke_many(self, name: str, job: JobHandle[Any] | str, payloads: Sequence[Any], *,
                    keys: Sequence[str] | None = None, **options: Any) -> list[Any]:
        """`invoke_many_async`, blocking."""
        return self._blocking(lambda _: self.invoke_many_async(name, job, payloads, keys=keys,
                                                               **options))


def _settle(reply: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """Answer a step function's call made in the handler's thread (on the loop)."""
    if reply.done():  # its try timed out: the answer is dropped
        return
    if error is not None:
        reply.set_exception(error)
    else:
        reply.set_result(value)


_CHILD_ERRORS: dict[JobState, type[JobError]] = {
    JobState.FAILED: JobFailed, JobState.DEAD: JobDead, JobState.CANCELLED: JobCancelled}


def _child_result(value: Mapping[str, Any]) -> Any:
    state = JobState(value["state"])
    if state == JobState.SUCCEEDED:
        return value.get("result")
    raise _CHILD_ERRORS[state](int(value["job_id"]), value.get("error"))


__all__ = ["Event", "EventTimeout", "ReplayDiverged", "StepNameReused", "StepTimeout", "Steps",
           "Suspended", "Unwinding"]
