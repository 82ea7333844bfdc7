"""The runners' shared turn (sqljobs._runtime.worker.turns): handlers that never wait
leave the loop to a task woken behind them within one budget, not one per runner.

Ten runner loops as the worker's (take a job, then give way when the turn is due) run
jobs that await nothing, on a clock that moves 1 ms a job; the budget is 2 ms. A task
woken partway (the settler, say) must run before the runners have run more than the
budget's jobs plus one each (a runner ahead of it in the loop's queue finishes the job
in hand, sees the turn due and yields). With each runner keeping its own 2 ms, as the
worker did before, every runner ahead of it ran its own burst first (about 30 jobs).
"""

from __future__ import annotations

import asyncio

from sqljobs._runtime.worker.turns import Turns

RUNNERS = 10
JOBS = 400


def test_a_task_woken_behind_busy_runners_runs_within_one_shared_budget() -> None:
    clock = [0.0]
    jobs_run = [0]
    woken_at: list[int] = []
    ran_at: list[int] = []

    async def scenario() -> None:
        turns = Turns(0.002, clock=lambda: clock[0])
        wake = asyncio.Event()

        async def runner() -> None:
            while jobs_run[0] < JOBS:
                jobs_run[0] += 1  # a job that awaits nothing
                clock[0] += 0.001
                if jobs_run[0] % 50 == 0:  # a settle arrives: the settler is woken
                    woken_at.append(jobs_run[0])
                    wake.set()
                if turns.due():
                    await turns.give_way()

        async def settler() -> None:
            while jobs_run[0] < JOBS:
                await wake.wait()
                wake.clear()
                ran_at.append(jobs_run[0])

        tasks = [asyncio.create_task(runner()) for _ in range(RUNNERS)]
        waiting = asyncio.create_task(settler())
        await asyncio.gather(*tasks)
        wake.set()
        await waiting

    asyncio.run(scenario())
    assert len(woken_at) == JOBS // 50
    delays = [ran - woken for woken, ran in zip(woken_at, ran_at, strict=True)]
    assert max(delays) <= 2 + 1 + RUNNERS, delays  # 2 ms of 1 ms jobs, the job in hand
