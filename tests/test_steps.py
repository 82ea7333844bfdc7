"""Durable steps in a real worker (in-process, real database): replay, typing, retries,
fencing, sleeps and event waits that free the worker's slot.

Handlers count each step function's real runs in `RUNS` (a Counter keyed by job id and
step name), so a test can prove what ran again and what was replayed from storage.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import (
    App,
    JobContext,
    ReservedStepName,
    RetryPolicy,
    StepNameReused,
    StepTimeout,
    fresh_key,
)
from sqljobs._runtime.steps import _backoff
from tests.processes import wait_for
from tests.worker_helpers import running

QUEUE = "steps"
RUNS: Counter[tuple[int, str]] = Counter()
GATES: dict[int, threading.Event] = {}


class Nothing(BaseModel):
    pass


class Count(BaseModel):
    n: int


class Quote(BaseModel):
    price: int
    currency: str


def effect(ctx: JobContext, name: str, value: Any) -> Callable[[], Any]:
    """A step function that counts its real runs."""
    def fn() -> Any:
        RUNS[ctx.job_id, name] += 1
        return value
    return fn


def make_app(dsn: str) -> App:
    app = App(dsn)
    fast = RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.01)

    @app.job(name="steps.replay", queue=QUEUE, retry=fast)
    async def replay(ctx: JobContext, payload: Count) -> dict[str, Any]:
        values = []
        for i in range(payload.n):
            values.append(await ctx.step.run_async(f"s{i}", effect(ctx, f"s{i}", {"i": i})))
            if i == payload.n // 2 and ctx.attempt == 1:
                raise RuntimeError("fail the first attempt half-way")
        return {"values": values, "round_trips": ctx.step.round_trips}

    @app.job(name="steps.types", queue=QUEUE, retry=fast)
    async def types(ctx: JobContext, payload: Nothing) -> dict[str, Any]:
        async def quote() -> Quote:
            return Quote(price=5, currency="EUR")

        pair = await ctx.step.run_async("pair", lambda: (1, 2))
        model = await ctx.step.run_async("quote", quote)
        typed = await ctx.step.run_async("typed", lambda: {"price": 7, "currency": "USD"},
                                   result_type=Quote)
        if ctx.attempt == 1:
            raise RuntimeError("again, to replay")
        assert isinstance(model, Quote) and isinstance(typed, Quote)
        return {"pair": pair, "quote": model.model_dump(), "typed": typed.price}

    @app.job(name="steps.duplicate", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def duplicate(ctx: JobContext, payload: Nothing) -> None:
        await ctx.step.run_async("same", lambda: 1)
        await ctx.step.run_async("same", lambda: 2)

    @app.job(name="steps.step_retry", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def step_retry(ctx: JobContext, payload: Nothing) -> int:
        def flaky() -> int:
            RUNS[ctx.job_id, "flaky"] += 1
            if RUNS[ctx.job_id, "flaky"] < 3:
                raise ConnectionError("try again")
            return RUNS[ctx.job_id, "flaky"]
        result: int = await ctx.step.run_async("flaky", flaky, retry=fast)
        return result

    @app.job(name="steps.sync", queue=QUEUE, retry=fast)
    def sync(ctx: JobContext, payload: Nothing) -> list[Any]:
        a = ctx.step.run("a", effect(ctx, "a", "A"))
        b = ctx.step.run("b", effect(ctx, "b", [1, "two"]))
        if ctx.attempt == 1:
            raise RuntimeError("again, to replay")
        ctx.step.sleep("nap", 0)
        return [a, b]

    @app.job(name="steps.sync_threads", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    def sync_threads(ctx: JobContext, payload: Nothing) -> dict[str, Any]:
        handler = threading.get_ident()
        before = threading.active_count()
        here = ctx.step.run("here", threading.get_ident)

        def slow() -> str:
            RUNS[ctx.job_id, "slow"] += 1
            threading.Event().wait(0.3)
            return "late"

        try:
            ctx.step.run("slow", slow, timeout=0.05)
            timed_out = False
        except StepTimeout:
            timed_out = True
        return {"in_handler_thread": here == handler, "timed_out": timed_out,
                "threads_started": threading.active_count() - before}

    @app.job(name="steps.reserved", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def reserved(ctx: JobContext, payload: Nothing) -> None:
        await ctx.step.run_async("sqljobs.unwind", lambda: 1)

    @app.job(name="steps.gated", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def gated(ctx: JobContext, payload: Nothing) -> None:
        await ctx.step.run_async("before", lambda: 1)
        gate = GATES[ctx.job_id] = threading.Event()
        await asyncio.to_thread(gate.wait, 30)
        await ctx.step.run_async("after", effect(ctx, "after", 2))

    @app.job(name="steps.sleeper", queue=QUEUE, retry=fast)
    async def sleeper(ctx: JobContext, payload: Count) -> dict[str, Any]:
        await ctx.step.run_async("before", effect(ctx, "before", 1))
        await ctx.step.sleep_async("nap", payload.n)
        await ctx.step.run_async("after", effect(ctx, "after", 2))
        return {"attempt": ctx.attempt}

    @app.job(name="steps.quick", queue=QUEUE)
    async def quick(ctx: JobContext, payload: Nothing) -> str:
        return "done"

    @app.job(name="steps.waiter", queue=QUEUE, retry=fast)
    async def waiter(ctx: JobContext, payload: Count) -> Any:
        return await ctx.step.wait_for_event_async("paid", event="order.paid",
                                             match={"order": payload.n})

    @app.job(name="steps.gap", queue=QUEUE, retry=fast)
    async def gap(ctx: JobContext, payload: Count) -> Any:
        # The event is emitted after the job started and before the wait is registered.
        await ctx.step.run_async("emit", lambda: app.emit_event("order.paid", {"order": payload.n}))
        return await ctx.step.wait_for_event_async("paid", event="order.paid",
                                             match={"order": payload.n})

    @app.job(name="steps.timeout", queue=QUEUE, retry=fast)
    async def timeout(ctx: JobContext, payload: Nothing) -> Any:
        got = await ctx.step.wait_for_event_async("never", event="never.sent", timeout=0.3)
        return {"got": got}

    @app.job(name="steps.first_of", queue=QUEUE, retry=fast)
    async def first_of(ctx: JobContext, payload: Count) -> Any:
        event = await ctx.step.wait_for_any_async(
            "decision",
            [("doc.approved", {"doc": payload.n}), ("doc.rejected", {"doc": payload.n})])
        assert event is not None
        return {"event": event.name, "payload": event.payload}

    @app.job(name="steps.square", queue=QUEUE, retry=fast)
    async def square(ctx: JobContext, payload: Count) -> int:
        if payload.n < 0:
            raise ValueError(f"negative: {payload.n}")
        return payload.n * payload.n

    @app.job(name="steps.parent", queue=QUEUE, retry=fast)
    async def parent(ctx: JobContext, payload: Count) -> dict[str, Any]:
        one = await ctx.step.invoke_async("one", square, {"n": payload.n})
        many = await ctx.step.invoke_many_async("many", square, [{"n": i} for i in range(4)])
        return {"one": one, "many": many, "attempt": ctx.attempt}

    @app.job(name="steps.bad_parent", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    def bad_parent(ctx: JobContext, payload: Nothing) -> Any:
        try:
            return ctx.step.invoke("child", "steps.square", {"n": -1}, queue=QUEUE,
                                        max_attempts=1)
        except Exception as error:
            return {"type": type(error).__name__, "kind": getattr(error, "kind", None)}

    class Refused(Exception):
        pass

    @app.job(name="steps.saga", queue=QUEUE, retry=RetryPolicy(max_attempts=2, base_s=0.01,
                                                              cap_s=0.01), terminal=(Refused,))
    async def saga(ctx: JobContext, payload: Count) -> None:
        async def undo(value: Any) -> str:
            UNDONE.setdefault(ctx.job_id, []).append(value["step"])
            return f"undid {value['step']}"

        for i in range(3):
            await ctx.step.run_async(f"book{i}", effect(ctx, f"book{i}", {"step": i}),
                                     compensate=undo)
        await ctx.step.run_async("plain", effect(ctx, "plain", 1))
        if payload.n == 0:
            raise Refused("no seats")          # terminal: failed at once
        if payload.n == 1:
            raise RuntimeError("flaky")        # retried, then dead
        await ctx.step.sleep_async("hold", 3600)      # parks: a cancel unwinds it

    return app


UNDONE: dict[int, list[int]] = {}


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    RUNS.clear()
    example = make_app(db_dsn)
    yield example
    example.close()


def enqueue(app: App, name: str, payload: dict[str, Any] | None = None) -> int:
    return app.job_handle(name).enqueue(payload or {}, key=fresh_key()).id


def row(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    cur = conn.execute("select state::text, attempt, result, last_error from jobs.job "
                       "where id = %s", (job_id,))
    found = cur.fetchone()
    assert found is not None and cur.description is not None
    return dict(zip([c.name for c in cur.description], found, strict=True))


def in_state(conn: psycopg.Connection[Any], job_id: int, *states: str) -> Callable[[], Any]:
    def check() -> Any:
        current = row(conn, job_id)
        return current if current["state"] in states else None
    return check


def steps_of(conn: psycopg.Connection[Any], job_id: int) -> list[str]:
    return [r[0] for r in conn.execute(
        "select name from jobs.job_steps(%s)", (job_id,)).fetchall()]


def test_a_retry_replays_stored_steps_without_running_them_again(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.replay", {"n": 10})
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded"), "the replayed job")
    assert done["attempt"] == 2
    assert done["result"]["values"] == [{"i": i} for i in range(10)]
    # every step function ran exactly once although the job ran twice
    assert [RUNS[job_id, f"s{i}"] for i in range(10)] == [1] * 10
    # the second attempt replayed s0..s5 with no statement and stored s6..s9 with one each
    assert done["result"]["round_trips"] == 4
    assert steps_of(conn, job_id) == [f"s{i}" for i in range(10)]


def test_a_step_returns_the_json_round_trip_typed_when_declared(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.types")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded"), "the typed job")
    assert done["result"] == {"pair": [1, 2], "quote": {"price": 5, "currency": "EUR"},
                              "typed": 7}


def test_a_reused_step_name_is_refused(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.duplicate")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "dead", "failed"), "the refused job")
    assert done["last_error"]["type"] == f"{StepNameReused.__module__}.StepNameReused"
    assert "same" in done["last_error"]["message"]
    assert steps_of(conn, job_id) == ["same"]


def test_a_step_retries_on_its_own_policy_within_the_attempt(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.step_retry")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded", "dead"), "the flaky step")
    assert (done["state"], done["attempt"], done["result"]) == ("succeeded", 1, 3)


def test_sync_handlers_use_the_blocking_forms_and_replay_too(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.sync")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded"), "the sync job")
    assert done["result"] == ["A", [1, "two"]]
    assert (RUNS[job_id, "a"], RUNS[job_id, "b"], done["attempt"]) == (1, 1, 2)


def test_a_sync_step_runs_in_the_handlers_thread_and_its_timeout_starts_none(
        app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.sync_threads")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded"), "the sync job")
    assert done["result"] == {"in_handler_thread": True, "timed_out": True,
                              "threads_started": 0}
    assert RUNS[job_id, "slow"] == 1  # it ran once, to its end, in the handler's thread
    assert steps_of(conn, job_id) == ["here"]  # the timed-out try stored nothing


def test_the_reserved_step_name_prefix_is_refused_by_the_engine(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.reserved")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "dead", "failed"), "the refused job")
    assert done["last_error"]["type"] == f"{ReservedStepName.__module__}.ReservedStepName"
    assert steps_of(conn, job_id) == []


@pytest.mark.parametrize("base, cap", [(1.0, 3600.0), (0.25, 3.0), (5.0, 5.0)])
def test_a_steps_backoff_is_the_engines_curve(conn: Any, base: float, cap: float) -> None:
    policy = RetryPolicy(max_attempts=50, base_s=base, cap_s=cap, jitter="none")
    for failures in (1, 2, 3, 7, 12, 40):
        engine = conn.execute("select jobs.backoff_s(%s, %s, %s, 'none')",
                              (failures, base, cap)).fetchone()[0]
        assert _backoff(policy, failures) == pytest.approx(engine)


def test_a_cancelled_run_stores_no_more_steps(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.gated")
    with running(app, concurrency=1):
        wait_for(lambda: job_id in GATES, "the job to reach its gate")
        conn.execute("select jobs.cancel(%s)", (job_id,))
        GATES[job_id].set()
        wait_for(lambda: row(conn, job_id)["state"] == "cancelled", "the cancel")
    assert steps_of(conn, job_id) == ["before"]
    assert RUNS[job_id, "after"] <= 1  # the function may run; its value is never stored


def test_sleeps_free_the_slot_and_resume_on_the_database_clock(app: App, conn: Any) -> None:
    sleepers = [enqueue(app, "steps.sleeper", {"n": 2}) for _ in range(2)]
    quick = enqueue(app, "steps.quick")
    with running(app, concurrency=1):
        # one slot: the quick job can only run because both sleepers parked
        wait_for(in_state(conn, quick, "succeeded"), "the quick job")
        for job_id in sleepers:
            assert row(conn, job_id)["state"] in ("parked", "ready", "running", "succeeded")
        done = [wait_for(in_state(conn, j, "succeeded"), "a sleeper") for j in sleepers]
    finished = conn.execute(
        "select bool_and(s.finished_at > q.finished_at) from jobs.job s, jobs.job q "
        "where s.id = any(%s) and q.id = %s", (sleepers, quick)).fetchone()
    assert finished == (True,)
    for job_id, result in zip(sleepers, done, strict=True):
        assert result["result"] == {"attempt": 1}, "a sleep is not an attempt"
        assert (RUNS[job_id, "before"], RUNS[job_id, "after"]) == (1, 1)
        assert steps_of(conn, job_id) == ["before", "nap", "after"]


def test_event_waits_free_the_slot_and_one_event_wakes_every_matching_waiter(
        app: App, conn: Any) -> None:
    waiters = [enqueue(app, "steps.waiter", {"n": 1}) for _ in range(2)]
    other = enqueue(app, "steps.waiter", {"n": 2})
    quick = enqueue(app, "steps.quick")
    with running(app, concurrency=1):
        wait_for(in_state(conn, quick, "succeeded"), "the quick job (waiters parked)")
        for job_id in [*waiters, other]:
            wait_for(in_state(conn, job_id, "parked"), "a parked waiter")
        app.emit_event("order.paid", {"order": 1, "amount": 10})
        for job_id in waiters:
            done = wait_for(in_state(conn, job_id, "succeeded"), "a woken waiter")
            assert done["result"] == {"order": 1, "amount": 10}
            assert done["attempt"] == 1
        assert row(conn, other)["state"] == "parked"
        app.emit_event("order.paid", {"order": 2})
        wait_for(in_state(conn, other, "succeeded"), "the other waiter")


def test_an_event_emitted_in_the_gap_before_the_wait_is_not_lost(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.gap", {"n": 42})
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded"), "the gap job")
    assert done["result"] == {"order": 42}
    kinds = conn.execute("select kind from jobs.step where job_id = %s order by ordinal",
                         (job_id,)).fetchall()
    assert kinds == [("run",), ("event",)]


def test_a_wait_timeout_is_stored_as_the_steps_outcome(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.timeout")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded"), "the timed-out wait")
    assert done["result"] == {"got": None}
    assert conn.execute("select kind, value from jobs.step where job_id = %s",
                        (job_id,)).fetchall() == [("timeout", {"timeout": True})]


def test_a_wait_for_the_first_of_several_events(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.first_of", {"n": 7})
    with running(app, concurrency=1):
        wait_for(in_state(conn, job_id, "parked"), "the parked wait")
        conn.execute("select jobs.emit_event('doc.rejected', '{\"doc\": 7}')")  # plain SQL
        done = wait_for(in_state(conn, job_id, "succeeded"), "the decision")
    assert done["result"] == {"event": "doc.rejected", "payload": {"doc": 7}}


def test_invoke_awaits_child_jobs_on_the_same_queue_at_concurrency_one(
        app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.parent", {"n": 5})
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded", "dead", "failed"), "the parent")
    assert done["state"] == "succeeded", done["last_error"]
    assert done["result"] == {"one": 25, "many": [0, 1, 4, 9], "attempt": 1}
    children = conn.execute(
        "select parent_step, state::text from jobs.job where parent_id = %s order by id",
        (job_id,)).fetchall()
    assert children == [("one", "succeeded"), *[(f"many[{i}]", "succeeded") for i in range(4)]]


def test_a_failed_child_raises_its_error_in_the_parent(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.bad_parent")
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "succeeded", "dead", "failed"), "the parent")
    assert done["result"] == {"type": "JobDead", "kind": "error"}


def saga_steps(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in conn.execute(
        "select name, kind from jobs.job_steps(%s)", (job_id,)).fetchall()]


@pytest.mark.parametrize(("n", "final", "attempt"), [(0, "failed", 1), (1, "dead", 2)])
def test_a_saga_that_fails_for_good_unwinds_in_reverse_order(
        app: App, conn: Any, n: int, final: str, attempt: int) -> None:
    job_id = enqueue(app, "steps.saga", {"n": n})
    with running(app, concurrency=1):
        done = wait_for(in_state(conn, job_id, "failed", "dead"), "the saga to settle")
    assert (done["state"], done["attempt"]) == (final, attempt)
    assert done["last_error"]["compensated"] is True
    assert UNDONE[job_id] == [2, 1, 0], "compensations run in reverse order, once each"
    assert [RUNS[job_id, f"book{i}"] for i in range(3)] == [1, 1, 1]
    names = [name for name, _ in saga_steps(conn, job_id)]
    assert names[-3:] == ["sqljobs.undo:book2", "sqljobs.undo:book1", "sqljobs.undo:book0"]
    assert "sqljobs.unwind" in names


def test_cancelling_a_parked_saga_unwinds_it(app: App, conn: Any) -> None:
    job_id = enqueue(app, "steps.saga", {"n": 2})
    with running(app, concurrency=1):
        wait_for(in_state(conn, job_id, "parked"), "the saga to park")
        conn.execute("select jobs.cancel(%s)", (job_id,))
        done = wait_for(in_state(conn, job_id, "cancelled"), "the unwind after the cancel")
    assert done["last_error"]["kind"] == "cancelled"
    assert UNDONE[job_id] == [2, 1, 0]
