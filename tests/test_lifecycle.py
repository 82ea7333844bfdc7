"""The long-running roles' shared skeleton (`_runtime/lifecycle.py`), tested directly.

- `Backoff`: `first` seconds, doubling per consecutive failure, at most `cap`; `reset`
  starts over.
- `Steps.conclude`, the saga's settle decision, in the branches that decide without
  writing.
- `Role.run_async`, with a minimal role on a real database: checks the schema, starts
  (its background tasks beside the loop), serves until a stop is asked for, drains, then
  finishes with its pool still open, cancels its background tasks and closes the pool;
  exit 0 after a drain, 1 after `stop_now` (no drain); a loop that raises still leaves
  tidy. A failing step pauses by the backoff policy and says why in one line (`failed`).

Every wait is on observed state (an event the role sets); SAFETY_S only turns a bug
into a failure instead of a hung run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import psycopg
import pytest

import sqljobs
from sqljobs import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.records import JobState
from sqljobs._runtime.lifecycle import Backoff, Role, failed
from sqljobs._runtime.steps import UNWIND_STEP, SagaEnd, Steps
from sqljobs._runtime.stopping import StopReason

SAFETY_S = 60.0


def test_backoff_doubles_from_first_up_to_its_cap_and_starts_over_on_reset() -> None:
    backoff = Backoff(first=0.2, cap=5.0)
    assert [backoff.next() for _ in range(8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert backoff.failures == 8
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next() == 0.2


def test_backoff_stops_doubling_after_six_failures_even_under_a_high_cap() -> None:
    backoff = Backoff(first=1.0, cap=1000.0)
    assert [backoff.next() for _ in range(9)] == [1, 2, 4, 8, 16, 32, 64, 64, 64]


class Probe(Role):
    """A role whose loop counts its turns and fails its first `failures` steps."""

    kind = "probe"
    install_signals = False

    def __init__(self, app: sqljobs.App, *, failures: int = 0,
                 error: Exception | None = None, escape: Exception | None = None) -> None:
        super().__init__(app)
        self.id = "probe-1"
        self.counts = {"turns": 0}
        self._log_extra = {}
        self.failures = failures
        self.error = error or RuntimeError("step broke")
        self.escape = escape
        self.backoff = Backoff(first=0.001, cap=0.004)
        self.pauses: list[float] = []
        self.seen: list[str] = []
        self.served = asyncio.Event()     # a step succeeded
        self.background: asyncio.Task[None] | None = None
        self.finished_with_open_pool: bool | None = None

    async def _start(self, client: AsyncClient, dsn: str,
                     background: list[asyncio.Task[None]]) -> None:
        self.seen.append("start")
        self.background = asyncio.create_task(self.keep())
        background.append(self.background)

    async def keep(self) -> None:
        await asyncio.Event().wait()  # beside the loop until cancelled

    @property
    def background_cancelled(self) -> bool:
        return self.background is not None and self.background.cancelled()

    async def step(self) -> None:
        if self.escape is not None:
            raise self.escape
        if self.failures:
            self.failures -= 1
            raise self.error
        self.counts["turns"] += 1

    async def _serve(self) -> None:
        self.seen.append("serve")
        while not self._stopping:
            self._wake.clear()
            try:
                await self.step()
            except (RuntimeError, psycopg.OperationalError) as error:
                pause = self.backoff.next()
                self.pauses.append(pause)
                failed(self.log, "probe step", error, pause, self._log_extra)
                await self._pause(pause)
                continue
            self.backoff.reset()
            self.served.set()
            await self._pause(SAFETY_S)  # until woken by a stop

    async def _drain(self) -> None:
        self.seen.append("drain")

    async def _finish(self, client: AsyncClient) -> None:
        self.seen.append("finish")
        self.finished_with_open_pool = await client.run(queries.schema_version()) is not None


async def started(probe: Probe) -> asyncio.Task[int]:
    running = asyncio.create_task(probe.run_async())
    waiting = asyncio.create_task(probe.served.wait())
    await asyncio.wait({running, waiting}, timeout=SAFETY_S,
                       return_when=asyncio.FIRST_COMPLETED)
    if running.done():  # it ended before serving: show why
        waiting.cancel()
        raise AssertionError(f"the role ended before serving: {running.result()}")
    assert probe.served.is_set()
    return running


def test_a_role_starts_serves_and_drains_on_a_stop(db_dsn: str) -> None:
    async def scenario() -> None:
        app = sqljobs.App(db_dsn)
        probe = Probe(app)
        running = await started(probe)
        probe.stop()
        code = await asyncio.wait_for(running, SAFETY_S)
        assert code == 0
        assert probe.seen == ["start", "serve", "drain", "finish"]
        assert probe.finished_with_open_pool is True
        assert probe.background_cancelled
        assert probe._client is None  # the pool is closed, the client let go
        assert probe.counts["turns"] == 1

    asyncio.run(scenario())


def test_stop_now_skips_the_drain_and_exits_1(db_dsn: str) -> None:
    async def scenario() -> None:
        probe = Probe(sqljobs.App(db_dsn))
        running = await started(probe)
        probe.stop_now()
        assert await asyncio.wait_for(running, SAFETY_S) == 1
        assert probe.seen == ["start", "serve", "finish"]
        assert probe.background_cancelled

    asyncio.run(scenario())


def test_a_stop_asked_for_before_the_run_ends_it_without_a_turn(db_dsn: str) -> None:
    probe = Probe(sqljobs.App(db_dsn))
    probe.stop()
    assert probe.run() == 0
    assert probe.seen == ["start", "serve", "drain", "finish"]
    assert probe.counts["turns"] == 0


def test_a_failing_step_backs_off_and_says_why_in_one_line(
        db_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        probe = Probe(sqljobs.App(db_dsn), failures=4)
        running = await started(probe)
        probe.stop()
        assert await asyncio.wait_for(running, SAFETY_S) == 0
        assert probe.pauses == [0.001, 0.002, 0.004, 0.004]
        assert probe.backoff.failures == 0  # a success starts the policy over
        assert probe.counts["turns"] == 1

    with caplog.at_level(logging.INFO, logger="sqljobs"):
        asyncio.run(scenario())
    lines = [r for r in caplog.records if "probe step failed" in r.getMessage()]
    assert len(lines) == 4
    assert all(r.levelno == logging.ERROR and r.exc_info for r in lines)  # a bug: traceback
    assert "retrying in 0.0 s" in lines[0].getMessage()


def test_a_connection_error_is_a_warning_without_a_traceback(
        db_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        error = psycopg.OperationalError("server closed the connection\nCONTEXT: x")
        probe = Probe(sqljobs.App(db_dsn), failures=1, error=error)
        running = await started(probe)
        probe.stop()
        assert await asyncio.wait_for(running, SAFETY_S) == 0

    with caplog.at_level(logging.INFO, logger="sqljobs"):
        asyncio.run(scenario())
    [line] = [r for r in caplog.records if "probe step failed" in r.getMessage()]
    assert line.levelno == logging.WARNING and not line.exc_info
    assert "(server closed the connection)" in line.getMessage()


def test_a_loop_that_raises_still_leaves_tidy(db_dsn: str) -> None:
    probe = Probe(sqljobs.App(db_dsn), escape=ValueError("the loop itself broke"))
    with pytest.raises(ValueError, match="the loop itself broke"):
        probe.run()
    assert probe.seen == ["start", "serve", "finish"]  # no drain after a crash
    assert probe.finished_with_open_pool is True
    assert probe.background_cancelled
    assert probe._client is None


def test_the_three_roles_are_the_skeleton() -> None:
    assert all(issubclass(role, Role) for role in (sqljobs.Worker, sqljobs.Relay,
                                                   sqljobs.Scheduler))
    for role in (sqljobs.Worker, sqljobs.Relay, sqljobs.Scheduler):
        assert "run_async" not in vars(role), f"{role.__name__} runs its own skeleton"




# -- the saga's settle decision, decided whole in Steps.conclude --------------------------
# The branches below decide without the engine: the run's engine call fails the test if
# it is reached. The branches that write (the unwind itself, `compensated`) are the saga
# tests' (tests/test_steps.py, tests/test_steps_processes.py), on a real job.


def saga_steps(loop: asyncio.AbstractEventLoop, stored: dict[str, object]) -> Steps:
    async def no_engine(call: Any) -> Any:
        raise AssertionError(f"conclude reached the engine: {call}")

    return Steps(job_id=1, claim=1, stored=stored, started_at=None, lease_s=None,
                 run=no_engine, cancelled=threading.Event(), lost=lambda: None, loop=loop)


async def conclude(steps: Steps, *, succeeded: bool, stop_reason: StopReason | None = None,
                   state: JobState | None = JobState.FAILED) -> tuple[SagaEnd, int]:
    asked = []

    async def fail_attempt() -> JobState | None:
        asked.append(state)
        return state

    end = await steps.conclude(succeeded=succeeded, stop_reason=stop_reason,
                               fail_attempt=fail_attempt)
    return end, len(asked)


async def with_a_compensation() -> Steps:
    steps = saga_steps(asyncio.get_running_loop(), {"reserve": 5})
    assert await steps.run_async("reserve", lambda: 0, compensate=lambda value: None) == 5
    assert steps.has_compensations  # (replayed from the stored value: no engine call)
    return steps


def test_conclude_settles_a_run_without_compensations_as_any_run() -> None:
    async def scenario() -> None:
        for succeeded in (True, False):
            steps = saga_steps(asyncio.get_running_loop(), {})
            assert await conclude(steps, succeeded=succeeded) == (SagaEnd("settle"), 0)

    asyncio.run(scenario())


def test_conclude_settles_a_saga_that_succeeded_or_was_stopped_by_lease_or_drain() -> None:
    async def scenario() -> None:
        assert await conclude(await with_a_compensation(), succeeded=True) == (
            SagaEnd("settle"), 0)
        for reason in ("lease_lost", "interrupt"):
            assert await conclude(await with_a_compensation(), succeeded=False,
                                  stop_reason=reason) == (SagaEnd("settle"), 0)
            unwinding = saga_steps(asyncio.get_running_loop(), {UNWIND_STEP: None})
            assert await conclude(unwinding, succeeded=False, stop_reason=reason) == (
                SagaEnd("settle"), 0)

    asyncio.run(scenario())


def test_conclude_fails_the_attempt_of_a_failed_saga_and_follows_the_engine() -> None:
    async def scenario() -> None:
        # not final: the engine settled it for a retry; the lease was lost: nothing more
        assert await conclude(await with_a_compensation(), succeeded=False,
                              state=JobState.READY) == (SagaEnd("settled"), 1)
        assert await conclude(await with_a_compensation(), succeeded=False,
                              stop_reason="timeout", state=None) == (SagaEnd("lost"), 1)

    asyncio.run(scenario())
