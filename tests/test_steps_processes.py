"""Durable steps across real worker processes: SIGKILL in the middle of a 50-step job.

The worker is `sqljobs worker tests.test_steps_processes:app` in a subprocess; each step
function records its real run (job, step, pid) in `public.step_effects` before its value
is stored, so the test can tell a replayed step (no new record) from a re-run one.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, JobContext, fresh_key
from tests.processes import wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
QUEUE = "steps_proc"
LEASE_S = 2.0
EFFECTS = """
create table if not exists public.step_effects (
  job_id bigint not null,
  step   integer not null,
  pid    integer not null
)
"""


# A handler's step (or compensation) number `gate` waits, once it has recorded its
# effect, until the test opens this job's gate: the test kills the worker while it is
# known to be there, at any machine speed, and opens the gate for the next worker.
GATE = "create table if not exists public.step_gate (job_id bigint primary key)"


class Steps(BaseModel):
    n: int
    pause_s: float = 0.05
    gate: int | None = None


async def gate(conn: psycopg.AsyncConnection[Any], job_id: int) -> None:
    """Wait until the test opens this job's gate (a row in public.step_gate)."""
    while True:
        found = await (await conn.execute(
            "select count(*) from public.step_gate where job_id = %s", (job_id,))).fetchone()
        if found and found[0]:
            return
        await asyncio.sleep(0.05)


app = App()


@app.job(name="steps_proc.many", queue=QUEUE)
async def many(ctx: JobContext, payload: Steps) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        async def step(i: int) -> int:
            await conn.execute("insert into public.step_effects values (%s, %s, %s)",
                               (ctx.job_id, i, os.getpid()))
            if i == payload.gate:
                await gate(conn, ctx.job_id)
            await asyncio.sleep(payload.pause_s)
            return i * i

        total = 0
        for i in range(payload.n):
            total += await ctx.step.run_async(f"s{i}", functools.partial(step, i))
    return {"total": total, "attempt": ctx.attempt}


class Refused(Exception):
    """Terminal for steps_proc.saga."""


SAGA_EFFECTS = """
create table if not exists public.saga_effects (
  seq    bigint generated always as identity,
  job_id bigint not null,
  undo   integer not null,
  pid    integer not null
)
"""


@app.job(name="steps_proc.saga", queue=QUEUE, terminal=(Refused,))
async def saga(ctx: JobContext, payload: Steps) -> None:
    # Compensations run after the handler returned: they open what they need themselves.
    async def undo(i: int) -> int:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            await conn.execute("insert into public.saga_effects (job_id, undo, pid) "
                               "values (%s, %s, %s)", (ctx.job_id, i, os.getpid()))
            if i == payload.gate:
                await gate(conn, ctx.job_id)
        await asyncio.sleep(payload.pause_s)
        return i

    for i in range(payload.n):
        await ctx.step.run_async(f"s{i}", functools.partial(int, i), compensate=undo)
    raise Refused("the last step is refused: unwind")


def spawn_worker(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", "from sqljobs._cli import main; main()", "worker",
             "tests.test_steps_processes:app", "--queue", QUEUE, "--lease", str(LEASE_S),
             "--poll-interval", "0.5", "--concurrency", "1"],
            cwd=REPO, env={**os.environ, "SQLJOBS_DSN": dsn}, stdout=out,
            stderr=subprocess.STDOUT)


@pytest.fixture
def workers(db_dsn: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        proc = spawn_worker(db_dsn, tmp_path / f"worker{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_sigkill_mid_job_resumes_without_rerunning_a_stored_step(
        db_dsn: str, conn: psycopg.Connection[Any],
        workers: Callable[[], subprocess.Popen[bytes]]) -> None:
    conn.execute(EFFECTS)
    conn.execute(GATE)
    conn.execute("truncate public.step_effects, public.step_gate")
    enqueued = conn.execute(
        "select id from jobs.enqueue('steps_proc.many', %s, '{\"n\": 50, \"gate\": 15}', %s)",
        (fresh_key(), f'{{"queue": "{QUEUE}"}}')).fetchone()
    assert enqueued is not None
    job_id = enqueued[0]

    def effects() -> int:
        found = conn.execute("select count(*) from public.step_effects").fetchone()
        return found[0] if found else 0

    first = workers()
    # Steps 0-14 stored, step 15 recorded its effect and waits at its gate: kill it there.
    wait_for(lambda: first.poll() is None and effects() >= 16,
             "the first worker to reach step 15's gate")
    first.kill()
    first.wait(10)
    stored_before = {r[0] for r in conn.execute(
        "select name from jobs.step where job_id = %s", (job_id,))}
    assert stored_before == {f"s{i}" for i in range(15)}, "the kill lands mid-job, at step 15"

    conn.execute("insert into public.step_gate values (%s)", (job_id,))
    second = workers()
    wait_for(lambda: conn.execute("select state = 'succeeded' from jobs.job where id = %s",
                                  (job_id,)).fetchone() == (True,),
             "the job to finish on the second worker")
    second.kill()

    result = conn.execute("select result from jobs.job where id = %s", (job_id,)).fetchone()
    assert result is not None
    assert result[0] == {"total": sum(i * i for i in range(50)), "attempt": 2}
    counts = dict(conn.execute("select step, count(*) from public.step_effects "
                               "where job_id = %s group by step", (job_id,)).fetchall())
    assert sorted(counts) == list(range(50)), "every step ran"
    for name in stored_before:
        assert counts[int(name[1:])] == 1, f"stored step {name} ran again"
    rerun = [step for step, n in counts.items() if n > 1]
    assert len(rerun) <= 1, rerun  # only the step in flight at the kill may run twice
    assert conn.execute("select count(*) from jobs.step where job_id = %s",
                        (job_id,)).fetchone() == (50,)


def test_sigkill_mid_unwind_resumes_without_repeating_a_finished_compensation(
        db_dsn: str, conn: psycopg.Connection[Any],
        workers: Callable[[], subprocess.Popen[bytes]]) -> None:
    conn.execute(SAGA_EFFECTS)
    conn.execute(GATE)
    conn.execute("truncate public.saga_effects, public.step_gate")
    # Compensations run s3, s2, s1, s0: the one of s2 waits at its gate.
    enqueued = conn.execute(
        "select id from jobs.enqueue('steps_proc.saga', %s, %s, %s)",
        (fresh_key(), '{"n": 4, "gate": 2}', f'{{"queue": "{QUEUE}"}}')).fetchone()
    assert enqueued is not None
    job_id = enqueued[0]

    first = workers()
    wait_for(lambda: first.poll() is None and conn.execute(
        "select count(*) from jobs.step where job_id = %s and kind = 'undo'",
        (job_id,)).fetchone() == (1,) and conn.execute(
        "select count(*) from public.saga_effects where job_id = %s and undo = 2",
        (job_id,)).fetchone() == (1,), "the first compensation stored, the second at its gate")
    first.kill()
    first.wait(10)
    undone_before = {r[0] for r in conn.execute(
        "select name from jobs.step where job_id = %s and kind = 'undo'", (job_id,))}
    assert undone_before == {"sqljobs.undo:s3"}
    assert conn.execute("select state::text, compensating from jobs.job where id = %s",
                        (job_id,)).fetchone() == ("running", True)

    conn.execute("insert into public.step_gate values (%s)", (job_id,))
    second = workers()
    wait_for(lambda: conn.execute("select state = 'failed' from jobs.job where id = %s",
                                  (job_id,)).fetchone() == (True,),
             "the unwind to finish on the second worker")
    second.kill()

    effects = [r[0] for r in conn.execute(
        "select undo from public.saga_effects where job_id = %s order by seq", (job_id,))]
    assert effects.count(3) == 1, f"a finished compensation ran again: {effects}"
    # reverse order; the compensation in flight at the kill (2) may run twice
    assert [u for i, u in enumerate(effects) if i == 0 or effects[i - 1] != u] == [3, 2, 1, 0]
    assert conn.execute(
        "select count(*) from jobs.step where job_id = %s and kind = 'undo'",
        (job_id,)).fetchone() == (4,)
