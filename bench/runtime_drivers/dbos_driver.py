"""DBOS Transact for Python through its public API, `steps` workload only: an async
@DBOS.workflow() whose body awaits --steps async @DBOS.step() calls, started with
DBOS.start_workflow_async under SetWorkflowID, DBOS launched in-process on this asyncio
loop (so DBOS runs the workflows it dequeues here too) with its defaults otherwise
(LISTEN/NOTIFY on, admin server off, logging quieted).

Database: the one given. system_database_url is the driver's DSN and DBOS.launch()
creates its `dbos` schema there (the untimed install); no application database is
configured, so DBOS creates no other database.

Replay: DBOS does not retry a workflow that raised; it records it ERROR for good. The
first run raises after its last step, and the documented way to run a failed workflow
again over its recorded steps is DBOS.fork_workflow(id, start_step): a new workflow
(same function and inputs) whose steps before start_step are copied from the original,
the copy written by the fork call itself (untimed). start_step is one past the last
recorded step, so all --steps are replayed from storage and none is re-executed.
--variant resume cuts the first run short instead: after its last step the workflow
cancels itself (DBOS.cancel_workflow_async) and DBOS.resume_workflow_async re-runs the
same workflow ID in place, over its own stored steps."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from _common import StepRecorder, args, emit, run_id, steps
from dbos import DBOS, DBOSConfig, SetWorkflowID
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL

A = args()
if A.workload != "steps":
    sys.exit("dbos: only `steps` is measured")
if A.variant not in ("", "fork", "resume"):
    sys.exit(f"dbos: unknown --variant {A.variant!r} (fork, resume)")
RESUME = A.variant == "resume"


class LoopStepRecorder(StepRecorder):
    """Sets `done` on the loop that waits for it, whichever thread the workflow runs on."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.loop: asyncio.AbstractEventLoop | None = None

    def after_step(self) -> None:
        run = self.runs[-1]
        run.append(time.time())
        if len(self.runs) >= 2 and len(run) == self.steps + 1 and self.loop is not None:
            self.loop.call_soon_threadsafe(self.done.set)


REC = LoopStepRecorder(A.steps)


@DBOS.step(name="bench.trivial")
async def trivial(i: int) -> int:
    REC.executed()
    return i


@DBOS.workflow(name="bench.steps")
async def step_job(n: int) -> int:
    REC.begin()
    for i in range(n):
        await trivial(i)
        REC.after_step()
    if REC.first_run:
        if RESUME:
            await DBOS.cancel_workflow_async(DBOS.workflow_id or "")
        else:
            raise RuntimeError("first run: fail after the last step so that it is re-run")
    return n


def sqlalchemy_url(dsn: str) -> str:
    """DBOS wants a URL; the runner hands a libpq DSN of either form."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return "postgresql://" + dsn.split("://", 1)[1]
    info = conninfo_to_dict(dsn)
    return URL.create(
        "postgresql", username=info.get("user"), password=info.get("password"),
        host=info.get("host"), port=int(info["port"]) if info.get("port") else None,
        database=info.get("dbname")).render_as_string(hide_password=False)


async def main() -> None:
    REC.loop = asyncio.get_running_loop()
    config: DBOSConfig = {"name": "bench", "system_database_url": sqlalchemy_url(A.dsn),
                          "run_admin_server": False, "log_level": "CRITICAL"}
    DBOS(config=config)
    DBOS.launch()  # migrates its schema into the given database: untimed
    wid = f"bench-steps-{run_id()}"
    rerun: list[Any] = []

    def start_worker() -> None:
        return None  # DBOS is launched: it runs what it dequeues on this loop

    async def enqueue() -> None:
        with SetWorkflowID(wid):
            first = await DBOS.start_workflow_async(step_job, A.steps)
        try:
            await first.get_result()
        except Exception:
            pass  # the first run's error (or, with `resume`, its cancellation)
        else:
            raise RuntimeError("steps: the first run succeeded; it should have failed")
        recorded = await DBOS.list_workflow_steps_async(wid)
        step_ids = [s["function_id"] for s in recorded if s["function_name"] == "bench.trivial"]
        if len(step_ids) != A.steps:
            raise RuntimeError(f"steps: {len(step_ids)} steps recorded; expected {A.steps}")
        if RESUME:
            rerun.append(await DBOS.resume_workflow_async(wid))
        else:
            with SetWorkflowID(f"{wid}-fork"):
                rerun.append(await DBOS.fork_workflow_async(wid, max(step_ids) + 1))

    async def stop_worker(_: None) -> None:
        await rerun[0].get_result()  # the re-run has recorded its success

    results = await steps(A, REC, start_worker, stop_worker, enqueue)
    DBOS.destroy()
    emit(results, "dbos")


asyncio.run(main())
