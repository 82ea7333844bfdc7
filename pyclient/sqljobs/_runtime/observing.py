"""Observers: what metrics and tracing see of a run, without the worker knowing either.

The worker calls an observer at the points of a job's path; the optional extras
(`sqljobs.metrics`, `sqljobs.tracing`) implement it, and the core imports neither. Every
hook is a no-op here, so an observer overrides only what it needs, and a worker with no
observer pays one empty loop per hook.

    observer.run_begins(job)      -> watch        the handler is about to start
    with watch.active():                           the handler is created inside it, so
        handler = ...                              it inherits (e.g.) the span context
    with watch.step(name, kind):                   around a durable step's function
    watch.event(name, attributes)                  a sleep or wait parked the job, ...
    watch.ended(label, error, duration_s)          the outcome is written (or lost)

An observer must not raise: a hook that fails is logged once per run and the run goes
on (observing is never a reason to lose a job).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqljobs._client.records import ClaimedJob

logger = logging.getLogger("sqljobs.observing")


class RunWatch:
    """One run as an observer sees it. The base class observes nothing."""

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Entered while the handler (task or thread context) is created."""
        yield

    @contextlib.contextmanager
    def step(self, name: str, kind: str) -> Iterator[None]:
        """Around one durable step as it runs (kind: run, sleep, wait, invoke, ...)."""
        yield

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Something happened during the run (the job parked, a step replayed, ...)."""

    def ended(self, label: str, error: Mapping[str, Any] | None, duration_s: float) -> None:
        """The run is over. label: succeeded, retried, snoozed, interrupted, failed, dead,
        parked, compensated, or lost (nothing written: the lease was gone); error: the
        error record written to last_error, if any."""


class RunObserver:
    """Sees every run of a worker. The base class observes nothing."""

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        return NO_WATCH

    def claimed(self, count: int, seconds: float) -> None:
        """A claim returned `count` jobs after `seconds`."""


NO_WATCH = RunWatch()


class Watches(RunWatch):
    """Several observers' watches of one run, each guarded (see the module doc)."""

    def __init__(self, watches: Sequence[RunWatch]) -> None:
        self._watches = list(watches)
        self._failed = False

    def _failure(self, hook: str) -> None:
        if not self._failed:
            self._failed = True
            logger.exception("an observer's %s hook failed; the run goes on", hook)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for watch in self._watches:
                try:
                    stack.enter_context(watch.active())
                except Exception:
                    self._failure("active")
            yield

    @contextlib.contextmanager
    def step(self, name: str, kind: str) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for watch in self._watches:
                try:
                    stack.enter_context(watch.step(name, kind))
                except Exception:
                    self._failure("step")
            yield

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        for watch in self._watches:
            try:
                watch.event(name, attributes)
            except Exception:
                self._failure("event")

    def ended(self, label: str, error: Mapping[str, Any] | None, duration_s: float) -> None:
        for watch in self._watches:
            try:
                watch.ended(label, error, duration_s)
            except Exception:
                self._failure("ended")


class Observers(RunObserver):
    """The worker's observers as one (an empty list costs nearly nothing)."""

    def __init__(self, observers: Sequence[RunObserver] = ()) -> None:
        self._observers = list(observers)

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        if not self._observers:
            return NO_WATCH
        watches = []
        for observer in self._observers:
            try:
                watches.append(observer.run_begins(job))
            except Exception:
                logger.exception("an observer's run_begins hook failed; the run goes on")
        return Watches(watches)

    def claimed(self, count: int, seconds: float) -> None:
        for observer in self._observers:
            try:
                observer.claimed(count, seconds)
            except Exception:
                logger.exception("an observer's claimed hook failed")
