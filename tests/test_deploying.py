"""Durable jobs across deploys (docs/howto-deploying.md): patch markers, replay
divergence, fork from a step.

One order flow is deployed as three generations of handler code, each its own App (the
same job name, as after a deploy), over jobs parked mid-history on an event wait; in the
three-generation test one job parks on a wait of its own before each release. Every
step function records its real runs in the table `deploy_effect`, so each test proves
what ran once, what was replayed from storage, and what never ran.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from sqljobs import App, JobContext, ReplayDiverged, RetryPolicy, StepNotFound, fresh_key
from sqljobs._cli import app as cli
from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._runtime.replay import History
from tests.cli_helpers import one_line
from tests.processes import wait_for
from tests.worker_helpers import running

QUEUE = "deploys"
ONCE = RetryPolicy(max_attempts=1)


class Order(BaseModel):
    order: int
    fail_ship: bool = False


def effect(dsn: str, ctx: JobContext, step: str) -> Callable[[], Awaitable[str]]:
    """A step function that records its real run in deploy_effect."""
    async def fn() -> str:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("insert into deploy_effect (job_id, step) values (%s, %s)",
                               (ctx.job_id, step))
        return step
    return fn


def generation(dsn: str, n: int) -> App:
    """The order flow as release n deploys it:
    1: reserve, charge, wait for shipped, ship
    2: adds a fraud check after charge, behind ctx.patched("fraud")
    3: moves charge before reserve (an unsafe change) and deprecates the patch
    """
    app = App(dsn)

    @app.job(name="deploy.order", queue=QUEUE, retry=ONCE)
    async def order(ctx: JobContext, payload: Order) -> dict[str, Any]:
        steps = ["charge", "reserve"] if n == 3 else ["reserve", "charge"]
        for step in steps:
            await ctx.step.run_async(step, effect(dsn, ctx, step))
        fraud = None
        if n == 2:
            fraud = await ctx.patched_async("fraud")
            if fraud:
                await ctx.step.run_async("fraud", effect(dsn, ctx, "fraud"))
        if n == 3:
            ctx.deprecate_patch("fraud")
            await ctx.step.run_async("fraud", effect(dsn, ctx, "fraud"))
        await ctx.step.wait_for_event_async("shipped", "order.shipped", {"order": payload.order})
        if payload.fail_ship and not ctx.key.count(":fork:"):
            raise RuntimeError("the carrier refused the parcel")
        await ctx.step.run_async("ship", effect(dsn, ctx, "ship"))
        return {"generation": n, "fraud": fraud}

    return app


@pytest.fixture
def dsn(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[str]:
    conn.execute("create table if not exists deploy_effect "
                 "(job_id bigint not null, step text not null)")
    yield db_dsn


def effects(conn: psycopg.Connection[Any], job_id: int) -> dict[str, int]:
    return dict(conn.execute("select step, count(*)::int from deploy_effect where job_id = %s "
                             "group by step", (job_id,)).fetchall())


def state(conn: psycopg.Connection[Any], job_id: int) -> tuple[str, Any, Any]:
    found = conn.execute("select state::text, result, last_error from jobs.job where id = %s",
                         (job_id,)).fetchone()
    assert found is not None
    return found[0], found[1], found[2]


def until_state(conn: psycopg.Connection[Any], job_id: int, *states: str) -> Any:
    return wait_for(lambda: state(conn, job_id) if state(conn, job_id)[0] in states else None,
                    f"job {job_id} to be {' or '.join(states)}")


def enqueue(app: App, order: int, **fields: Any) -> int:
    return app.job_handle("deploy.order").enqueue({"order": order, **fields}, key=fresh_key()).id


def parked_on(dsn: str, conn: psycopg.Connection[Any], n: int, order: int,
              **fields: Any) -> int:
    """A job run by generation n until it parks on its event wait."""
    app = generation(dsn, n)
    try:
        job_id = enqueue(app, order, **fields)
        with running(app, concurrency=2):
            until_state(conn, job_id, "parked")
    finally:
        app.close()
    return job_id


def ship(app: App, *orders: int) -> None:
    for order in orders:
        app.emit_event("order.shipped", {"order": order})


def lifecycle(dsn: str, n: int) -> App:
    """The order flow with three event waits, so that one job parks between releases:
    1: reserve, wait "paid", charge, wait "shipped", ship, wait "delivered"
    2: adds a fraud check after charge, behind ctx.patched("fraud")
    3: moves charge before reserve (an unsafe change) and deprecates the patch
    """
    app = App(dsn)

    @app.job(name="deploy.lifecycle", queue=QUEUE, retry=ONCE)
    async def order(ctx: JobContext, payload: Order) -> dict[str, Any]:
        async def wait(step: str) -> None:
            await ctx.step.wait_for_event_async(step, f"order.{step}", {"order": payload.order})

        async def run(step: str) -> None:
            await ctx.step.run_async(step, effect(dsn, ctx, step))

        if n == 3:
            await run("charge")
        await run("reserve")
        await wait("paid")
        if n != 3:
            await run("charge")
        fraud = None
        if n == 2:
            fraud = await ctx.patched_async("fraud")
            if fraud:
                await run("fraud")
        if n == 3:
            ctx.deprecate_patch("fraud")
            await run("fraud")
        await wait("shipped")
        await run("ship")
        await wait("delivered")
        return {"generation": n, "fraud": fraud}

    return app


def history(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[str, Any]]:
    """The job's stored steps, in the order they were written."""
    return [(name, value) for name, value in conn.execute(
        "select name, value from jobs.job_steps(%s)", (job_id,)).fetchall()]


def parked_on_wait(conn: psycopg.Connection[Any], job_id: int, wait: str) -> None:
    """Wait until the job is parked on its event wait `wait` (each wait parks once)."""
    wait_for(lambda: state(conn, job_id)[0] == "parked" and conn.execute(
        "select 1 from jobs.event_wait where job_id = %s and step = %s",
        (job_id, wait)).fetchone(), f"job {job_id} to park on {wait!r}")


def test_three_generations_replay_a_parked_job_step_by_step(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """One job, parked between releases, is replayed by release 1 (unchanged code), by
    release 2 (a patch) and by release 3 (a reordered step, which diverges)."""
    emit = App(dsn)
    try:
        # Release 1 runs the job until it waits for "paid"; paid, it replays reserve
        # (unchanged code: nothing runs twice), charges, and parks again on "shipped".
        first = lifecycle(dsn, 1)
        try:
            job = first.job_handle("deploy.lifecycle").enqueue({"order": 1}, key=fresh_key()).id
            with running(first, concurrency=2):
                parked_on_wait(conn, job, "paid")
                assert effects(conn, job) == {"reserve": 1}
                emit.emit_event("order.paid", {"order": 1})
                parked_on_wait(conn, job, "shipped")
        finally:
            first.close()
        assert effects(conn, job) == {"reserve": 1, "charge": 1}
        assert [n for n, _ in history(conn, job)] == ["reserve", "paid", "charge"]

        # Release 2: the parked job replays past the patch point (False: its history went
        # on without it) and skips fraud; a new job takes the patched branch (True).
        second = lifecycle(dsn, 2)
        try:
            new = second.job_handle("deploy.lifecycle").enqueue({"order": 2}, key=fresh_key()).id
            with running(second, concurrency=2):
                emit.emit_event("order.shipped", {"order": 1})
                parked_on_wait(conn, job, "delivered")
                for event, step in (("paid", "paid"), ("shipped", "shipped"),
                                    ("delivered", "delivered")):
                    parked_on_wait(conn, new, step)
                    emit.emit_event(f"order.{event}", {"order": 2})
                _, new_result, _ = until_state(conn, new, "succeeded")
        finally:
            second.close()
        assert effects(conn, job) == {"reserve": 1, "charge": 1, "ship": 1}  # no fraud, none twice
        assert [n for n, _ in history(conn, job)] == [
            "reserve", "paid", "charge", "sqljobs.patch:fraud", "shipped", "ship"]
        assert ("sqljobs.patch:fraud", False) in history(conn, job)
        assert new_result == {"generation": 2, "fraud": True}
        assert effects(conn, new) == {"reserve": 1, "charge": 1, "fraud": 1, "ship": 1}
        assert ("sqljobs.patch:fraud", True) in history(conn, new)

        # Release 3 moved charge before reserve: the parked job's replay stops before any
        # step runs, with the step that differs named.
        stored = history(conn, job)
        third = lifecycle(dsn, 3)
        try:
            with running(third, concurrency=2):
                emit.emit_event("order.delivered", {"order": 1})
                _, _, error = until_state(conn, job, "failed", "dead")
        finally:
            third.close()
    finally:
        emit.close()
    assert error["type"] == "sqljobs.ReplayDiverged"
    assert "'charge' before stored step 'reserve'" in error["message"]
    assert effects(conn, job) == {"reserve": 1, "charge": 1, "ship": 1}  # nothing new ran
    assert history(conn, job) == stored                                  # nothing stored


def patch_release(dsn: str, patched: bool, answers: dict[int, list[bool]]) -> App:
    """The same flow as a sync and an async handler: reserve, (ctx.patched("fraud") when
    `patched`, its answers kept in `answers`), wait for "shipped", ship."""
    app = App(dsn)

    def record(ctx: JobContext, step: str) -> Callable[[], str]:
        def fn() -> str:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("insert into deploy_effect (job_id, step) values (%s, %s)",
                          (ctx.job_id, step))
            return step
        return fn

    @app.job(name="deploy.patch.sync", queue=QUEUE, retry=ONCE)
    def sync_form(ctx: JobContext, payload: Order) -> bool | None:
        ctx.step.run("reserve", record(ctx, "reserve"))
        answer = None
        if patched:
            answer = ctx.patched("fraud")
            answers.setdefault(ctx.job_id, []).append(answer)
        ctx.step.wait_for_event("shipped", "order.shipped", {"order": payload.order})
        ctx.step.run("ship", record(ctx, "ship"))
        return answer

    @app.job(name="deploy.patch.async", queue=QUEUE, retry=ONCE)
    async def async_form(ctx: JobContext, payload: Order) -> bool | None:
        await ctx.step.run_async("reserve", effect(dsn, ctx, "reserve"))
        answer = None
        if patched:
            answer = await ctx.patched_async("fraud")
            answers.setdefault(ctx.job_id, []).append(answer)
        await ctx.step.wait_for_event_async("shipped", "order.shipped", {"order": payload.order})
        await ctx.step.run_async("ship", effect(dsn, ctx, "ship"))
        return answer

    return app


def test_the_sync_patched_answers_as_the_async_one_and_a_replay_reuses_the_answer(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """ctx.patched (sync handler) and ctx.patched_async: False for a job parked before the
    patch, True for a new one; a second replay by the same release answers from the
    stored marker (no new step row), and so does the run that completes the job."""
    answers: dict[int, list[bool]] = {}
    forms = ("sync", "async")
    old = patch_release(dsn, False, answers)
    try:
        parked = {form: old.job_handle(f"deploy.patch.{form}").enqueue(
            {"order": 400 + i}, key=fresh_key()).id for i, form in enumerate(forms)}
        with running(old, concurrency=2):
            for job_id in parked.values():
                until_state(conn, job_id, "parked")
    finally:
        old.close()

    def rows(job_id: int) -> int:
        found = conn.execute("select count(*)::int from jobs.step where job_id = %s",
                             (job_id,)).fetchone()
        assert found is not None
        return int(found[0])

    def replayed(job_id: int, times: int) -> None:
        wait_for(lambda: len(answers.get(job_id, [])) == times
                 and state(conn, job_id)[0] == "parked", f"job {job_id} to replay {times}x")

    new = patch_release(dsn, True, answers)
    stored: dict[str, list[int]] = {}
    try:
        fresh = {form: new.job_handle(f"deploy.patch.{form}").enqueue(
            {"order": 410 + i}, key=fresh_key()).id for i, form in enumerate(forms)}
        with running(new, concurrency=2):
            for form in forms:
                replayed(fresh[form], 1)
                for times in (1, 2):  # woken twice: two replays past the patch point
                    new.client.run(queries.promote(parked[form]))
                    replayed(parked[form], times)
                    stored.setdefault(form, []).append(rows(parked[form]))
            ship(new, 400, 401, 410, 411)
            results = {form: (until_state(conn, parked[form], "succeeded")[1],
                              until_state(conn, fresh[form], "succeeded")[1]) for form in forms}
    finally:
        new.close()
    for form in forms:
        assert answers[parked[form]] == [False, False, False], form  # 2 wakes, then shipped
        assert answers[fresh[form]] == [True, True], form             # first run, then shipped
        assert results[form] == (False, True), form
        assert stored[form][0] == stored[form][1], form  # the second replay stored nothing
        for job_id in (parked[form], fresh[form]):
            assert conn.execute("select count(*)::int from jobs.step where job_id = %s and "
                                "name = 'sqljobs.patch:fraud'", (job_id,)).fetchone() == (1,)
            assert effects(conn, job_id) == {"reserve": 1, "ship": 1}
    assert answers[parked["sync"]] == answers[parked["async"]]
    assert answers[fresh["sync"]] == answers[fresh["async"]]


def test_a_deprecated_patch_refuses_a_history_that_took_the_old_branch(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    # A job parked by release 1, woken and replayed by release 2 past the patch point
    # (its marker stored False), parks again on its wait.
    job_id = parked_on(dsn, conn, 1, order=10)
    second = generation(dsn, 2)
    try:
        with running(second, concurrency=1):
            second.client.run(queries.promote(job_id))
            wait_for(lambda: conn.execute(
                "select value from jobs.step where job_id = %s and name = 'sqljobs.patch:fraud'",
                (job_id,)).fetchone() == (False,), "the marker stored False")
            until_state(conn, job_id, "parked")
    finally:
        second.close()
    deprecating = App(dsn)

    @deprecating.job(name="deploy.order", queue=QUEUE, retry=ONCE)
    async def order(ctx: JobContext, payload: Order) -> None:
        await ctx.step.run_async("reserve", effect(dsn, ctx, "reserve"))
        await ctx.step.run_async("charge", effect(dsn, ctx, "charge"))
        ctx.deprecate_patch("fraud")
        await ctx.step.run_async("fraud", effect(dsn, ctx, "fraud"))

    try:
        with running(deprecating, concurrency=1):
            ship(deprecating, 10)
            _, _, error = until_state(conn, job_id, "failed", "dead")
    finally:
        deprecating.close()
    assert error["type"] == "sqljobs.ReplayDiverged"
    assert "patch 'fraud'" in error["message"]
    assert effects(conn, job_id) == {"reserve": 1, "charge": 1}


def test_safe_changes_replay_and_unsafe_ones_stop_before_running(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Every change docs/howto-deploying.md lists, over a job release 1 parked after
    reserve and charge on its wait for "shipped": a changed step body, code between
    steps that stores nothing and a step added after the last stored one replay; a
    removed, renamed, moved or inserted step raises ReplayDiverged and runs nothing new."""
    # "shipped": the event wait; "+name": the step with a new body (another function,
    # another value); "~between": code between steps that stores nothing
    variants: dict[str, list[str]] = {
        "body changed": ["+reserve", "+charge", "shipped", "+notify"],
        "code between steps": ["reserve", "~between", "charge", "~between", "shipped"],
        "step appended": ["reserve", "charge", "shipped", "notify"],
        "step removed": ["charge", "shipped"],
        "step renamed": ["reserve", "bill", "shipped"],
        "step moved": ["charge", "reserve", "shipped"],
        "step inserted": ["reserve", "audit", "charge", "shipped"],
    }
    safe = {"body changed", "code between steps", "step appended"}
    parked = {label: parked_on(dsn, conn, 1, order=100 + i) for i, label in enumerate(variants)}
    for i, (label, steps) in enumerate(variants.items()):
        app = App(dsn)
        app.job(name="deploy.order", queue=QUEUE, retry=ONCE)(release(dsn, steps))
        try:
            with running(app, concurrency=1):
                ship(app, 100 + i)
                final, result, error = until_state(conn, parked[label], "succeeded", "failed",
                                                   "dead")
        finally:
            app.close()
        assert (final == "succeeded") is (label in safe), (label, error)
        ran = effects(conn, parked[label])
        if label == "body changed":     # the stored values; only the new step's new body ran
            assert result == ["reserve", "charge", "shipped", "notify v2"]
            assert ran == {"reserve": 1, "charge": 1, "notify v2": 1}
        elif label == "code between steps":  # runs on every replay (at two places here)
            assert result == ["reserve", "charge", "shipped"]
            assert ran == {"reserve": 1, "charge": 1, "between": 2}
        elif label == "step appended":
            assert result == ["reserve", "charge", "shipped", "notify"]
            assert ran == {"reserve": 1, "charge": 1, "notify": 1}
        else:
            assert error["type"] == "sqljobs.ReplayDiverged", (label, error)
            assert ran == {"reserve": 1, "charge": 1}, (label, ran)  # nothing new ran


def release(dsn: str, steps: list[str]) -> Callable[[JobContext, Order], Awaitable[list[str]]]:
    """A handler that asks for these steps in order and answers their values: "shipped"
    is the event wait, "+name" the step `name` with a new body (it records and answers
    "name v2"), "~name" code that records `name` and stores nothing."""
    async def order(ctx: JobContext, payload: Order) -> list[str]:
        values = []
        for step in steps:
            if step == "shipped":
                await ctx.step.wait_for_event_async("shipped", "order.shipped",
                                                    {"order": payload.order})
                values.append(step)
            elif step.startswith("~"):
                await effect(dsn, ctx, step[1:])()
            elif step.startswith("+"):
                values.append(await ctx.step.run_async(
                    step[1:], effect(dsn, ctx, f"{step[1:]} v2")))
            else:
                values.append(await ctx.step.run_async(step, effect(dsn, ctx, step)))
        return values
    return order


def test_removing_trailing_stored_steps_is_not_detected_and_runs_nothing_new(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """As docs/howto-deploying.md says: removing stored steps at the end of the history,
    with no step asked for after them, is not detected (there is no end-of-run check):
    the job ends and nothing new runs. Asking for a new step after them diverges."""
    dropped = parked_on(dsn, conn, 1, order=200)    # history: reserve, charge, (shipped)
    replaced = parked_on(dsn, conn, 1, order=201)
    cases = [(dropped, ["reserve"]), (replaced, ["reserve", "notify"])]
    outcomes = []
    for job_id, steps in cases:
        app = App(dsn)
        app.job(name="deploy.order", queue=QUEUE, retry=ONCE)(release(dsn, steps))
        try:
            with running(app, concurrency=1):
                app.client.run(queries.promote(job_id))
                outcomes.append(until_state(conn, job_id, "succeeded", "failed", "dead"))
        finally:
            app.close()
    assert outcomes[0][:2] == ("succeeded", ["reserve"])
    assert effects(conn, dropped) == {"reserve": 1, "charge": 1}   # charge not run again
    final, _, error = outcomes[1]
    assert final in ("failed", "dead") and error["type"] == "sqljobs.ReplayDiverged"
    assert "new step 'notify' before stored step 'charge'" in error["message"]
    assert effects(conn, replaced) == {"reserve": 1, "charge": 1}  # notify never ran


def test_a_diverged_attempt_follows_the_retry_policy_like_any_handler_error(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """max_attempts=2: the first diverged attempt sends the job back to wait for its
    retry with the error recorded, the second ends it, exactly as a handler that raises
    at the same point; neither attempt runs a side effect of the new branch."""
    policy = RetryPolicy(max_attempts=2, base_s=3600, cap_s=3600)  # the retry waits: observed
    parking = App(dsn)
    parking.job(name="deploy.retried", queue=QUEUE, retry=policy)(
        release(dsn, ["reserve", "charge", "shipped", "ship"]))
    try:
        diverging, raising = (parking.job_handle("deploy.retried").enqueue(
            {"order": order}, key=fresh_key()).id for order in (300, 301))
        with running(parking, concurrency=2):
            for job_id in (diverging, raising):
                until_state(conn, job_id, "parked")
    finally:
        parking.close()

    moved = release(dsn, ["charge", "reserve", "shipped", "ship"])
    deployed = App(dsn)

    @deployed.job(name="deploy.retried", queue=QUEUE, retry=policy)
    async def retried(ctx: JobContext, payload: Order) -> list[str]:
        if payload.order == 301:  # the control: replays as stored, then raises
            await ctx.step.run_async("reserve", effect(dsn, ctx, "reserve"))
            await ctx.step.run_async("charge", effect(dsn, ctx, "charge"))
            raise RuntimeError("a plain handler error")
        return await moved(ctx, payload)

    def attempt(job_id: int, done: int) -> tuple[str, int, bool, str]:
        """The job once its attempt `done` ended: state, attempts, waiting for a retry?,
        the error recorded."""
        def ended() -> tuple[str, int, bool, str] | None:
            found = conn.execute(
                "select state::text, attempt, run_at > now(), last_error->>'type' "
                "from jobs.job where id = %s", (job_id,)).fetchone()
            # the woken job waiting for its claim is ready too, but without an error
            return (found if found and found[1] == done and found[0] != "running"
                    and found[3] is not None else None)
        return wait_for(ended, f"job {job_id} to end attempt {done}")

    try:
        with running(deployed, concurrency=2):
            ship(deployed, 300, 301)
            first = {job_id: attempt(job_id, 1) for job_id in (diverging, raising)}
            for job_id in (diverging, raising):
                deployed.client.run(queries.promote(job_id))  # run the retry now
            second = {job_id: attempt(job_id, 2) for job_id in (diverging, raising)}
    finally:
        deployed.close()
    assert first[diverging] == ("ready", 1, True, "sqljobs.ReplayDiverged")
    assert first[raising][:3] == first[diverging][:3]
    assert second[diverging][:3] in (("dead", 2, False), ("failed", 2, False)), second
    assert second[raising][:3] == second[diverging][:3]
    assert second[diverging][3] == "sqljobs.ReplayDiverged"
    assert effects(conn, diverging) == {"reserve": 1, "charge": 1}  # ship never ran
    assert effects(conn, raising) == {"reserve": 1, "charge": 1}


def test_steps_started_together_replay_in_any_order(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = App(dsn)
    attempts: list[int] = []

    @app.job(name="deploy.fanout", queue=QUEUE, retry=RetryPolicy(max_attempts=2, base_s=0.01))
    async def fanout(ctx: JobContext, payload: Order) -> list[str]:
        attempts.append(ctx.attempt)
        slow_first = ctx.attempt == 1

        def step(name: str, delay: float) -> Callable[[], Awaitable[str]]:
            async def fn() -> str:
                await asyncio.sleep(delay)
                return await effect(dsn, ctx, name)()
            return fn

        # attempt 1 stores b before a; attempt 2 asks a first: both replay
        values = await asyncio.gather(
            ctx.step.run_async("a", step("a", 0.2 if slow_first else 0)),
            ctx.step.run_async("b", step("b", 0)))
        if ctx.attempt == 1:
            raise RuntimeError("again, to replay")
        return list(values)

    try:
        job_id = app.job_handle("deploy.fanout").enqueue({"order": 1}, key=fresh_key()).id
        with running(app, concurrency=1):
            _, result, _ = until_state(conn, job_id, "succeeded")
    finally:
        app.close()
    assert [r[0] for r in conn.execute("select name from jobs.job_steps(%s)",
                                       (job_id,)).fetchall()] == ["b", "a"]
    assert result == ["a", "b"] and attempts == [1, 2]
    assert effects(conn, job_id) == {"a": 1, "b": 1}


def test_a_failed_job_is_forked_from_a_step_and_the_fork_completes(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = generation(dsn, 1)
    try:
        job_id = enqueue(app, 7, fail_ship=True)
        with running(app, concurrency=1):
            until_state(conn, job_id, "parked")
            ship(app, 7)
            until_state(conn, job_id, "failed", "dead")

            with pytest.raises(StepNotFound) as missing:
                app.client.run(queries.fork(job_id, "nope"))
            assert "'reserve', 'charge', 'shipped'" in (missing.value.detail or "")

            result = CliRunner().invoke(cli, ["jobs", "fork", str(job_id), "--from-step",
                                              "shipped", "--json", "--dsn", dsn])
            assert result.exit_code == 0, result.output
            fork = int(json.loads(result.output)["job_id"])
            until_state(conn, fork, "parked")  # a fork waits for events after its own start
            ship(app, 7)
            _, fork_result, _ = until_state(conn, fork, "succeeded")
    finally:
        app.close()
    assert fork_result == {"generation": 1, "fraud": None}
    assert effects(conn, job_id) == {"reserve": 1, "charge": 1}  # the original's, once
    assert effects(conn, fork) == {"ship": 1}                     # replayed, then shipped
    assert state(conn, job_id)[0] in ("failed", "dead")            # left as it was
    assert conn.execute("select forked_from, from_step from jobs.job_forked_from(%s)",
                        (fork,)).fetchone() == (job_id, "shipped")


def test_the_cli_refuses_a_fork_in_one_line_naming_the_error_code(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """`sqljobs jobs fork` refused: a step the history does not have (StepNotFound,
    SJ021) and a running original (JobRunning, SJ009) exit 1 with an `error:` line naming
    the code, no traceback, and no fork made."""
    client = Client(conn)
    finished = client.run(queries.enqueue("deploy.cli", fresh_key(), {}, {"queue": "cli"})).id
    held = client.run(queries.claim(["cli"], "w", 1, 30))[0]
    client.run(queries.step_put(held.id, held.claim, "reserve", {"slot": 1}))
    client.run(queries.nack(held.id, held.claim, {"message": "no"}, "fail"))
    running_job = client.run(queries.enqueue("deploy.cli", fresh_key(), {}, {"queue": "cli"})).id
    runner = client.run(queries.claim(["cli"], "w", 1, 30))[0]
    assert runner.id == running_job
    client.run(queries.step_put(runner.id, runner.claim, "reserve", {"slot": 2}))

    for job_id, step, code, named in ((finished, "missing", "SJ021 step_not_found", "missing"),
                                      (running_job, "reserve", "SJ009 job_running", "")):
        result = CliRunner().invoke(cli, ["jobs", "fork", str(job_id), "--from-step", step,
                                          "--dsn", db_dsn])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit), result.exception  # not a crash
        assert "Traceback" not in result.output, result.output
        line = one_line(result, code)
        assert line.startswith(f"error: {code}: ") and named in line, line
    assert conn.execute("select count(*)::int from jobs.job_fork").fetchone() == (0,)


def test_the_history_check_rules() -> None:
    history = History(["a", "sqljobs.patch:p", "b", "c"])
    history.ask(["a"])
    assert history.skipped("a") is None and history.skipped("b") is None
    assert history.skipped("c") == "b"         # c asked before b
    assert history.skipped("new") == "b"       # a new step while b and c wait
    assert history.passed
    history.ask(["c", "b"])
    assert history.skipped("new") is None and not history.passed
    assert History([]).skipped("x") is None    # no stored order: nothing to check


def test_replay_diverged_is_public_and_typed() -> None:
    error = ReplayDiverged.of(5, "charge", "reserve", stored=True)
    assert isinstance(error, RuntimeError) and "stored step 'charge'" in str(error)
    with pytest.raises(ValueError):
        asyncio.run(_patched_with_no_id())


async def _patched_with_no_id() -> None:
    from sqljobs._runtime.steps import Steps

    async def never(call: Any) -> Any:
        raise AssertionError("no round trip")

    steps = Steps(job_id=1, claim=1, stored={}, started_at=None, lease_s=None, run=never,
                  cancelled=threading.Event(), lost=lambda: None,
                  loop=asyncio.get_running_loop())
    await steps.patched_async("")


def rolling_release(dsn: str, version: str) -> Callable[[JobContext, Order], Awaitable[str]]:
    """Release `version` of a job that records each run, stores a step, and fails its
    first attempt."""
    async def rolling(ctx: JobContext, payload: Order) -> str:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            await c.execute("insert into deploy_run values (%s, %s, %s)",
                            (ctx.job_id, ctx.attempt, version))
        await ctx.step.run_async("begun", lambda: version)
        if ctx.attempt == 1:
            raise RuntimeError("again, on the same release")
        return version
    return rolling


def test_a_rolling_deploy_replays_each_job_on_the_version_that_began_it(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Workers of releases v1 and v2 race on one queue; every job fails its first attempt
    after a step, and its retry is claimed only by the version that began it."""
    conn.execute("create table if not exists deploy_run "
                 "(job_id bigint not null, attempt int not null, version text not null)")
    apps = {v: App(dsn, code_version=v) for v in ("v1", "v2")}
    for version, app in apps.items():
        app.job(name="deploy.rolling", queue=QUEUE,
                retry=RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.01))(
            rolling_release(dsn, version))

    try:
        ids = [apps["v1"].job_handle("deploy.rolling").enqueue({"order": i}, key=fresh_key()).id
               for i in range(20)]
        with running(apps["v1"], concurrency=2), running(apps["v2"], concurrency=2):
            for job_id in ids:
                until_state(conn, job_id, "succeeded")
    finally:
        for app in apps.values():
            app.close()
    runs = conn.execute("select job_id, array_agg(distinct version), count(*)::int, "
                        "(select code_version from jobs.job j where j.id = r.job_id) "
                        "from deploy_run r where job_id = any(%s) group by job_id",
                        (ids,)).fetchall()
    assert len(runs) == 20
    for job_id, versions, attempts, recorded in runs:
        assert len(versions) == 1 and attempts == 2, (job_id, versions, attempts)
        assert recorded == versions[0]
