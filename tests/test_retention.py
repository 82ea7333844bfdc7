"""Retention at volume: 50,000 jobs through purge cycles, and the scheduler's leader
purging on its own (docs/howto-retention.md).

Each cycle enqueues 10,000 jobs (enqueue_many in batches), settles them quickly through
SQL (claim + ack_many / nack_many) into every state, some awaited (watch_outcome), some
with stored steps, some staged through the outbox, some parents of child jobs, and then
purges in bounded batches until nothing is eligible. Before each purge the test works
out, from a snapshot of the table, exactly which jobs the rules must keep; after it,
the table holds exactly those: nothing live, awaited or still referenced is gone, and
everything eligible is.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sqljobs import App
from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._runtime.scheduler import Scheduler
from tests.processes import scalar

CYCLES = 5
PER_CYCLE = 10_000
BATCH = 1000
PURGE_BATCH = 4000
LIVE = ("ready", "running", "parked", "interrupted")
# every final state purged at once; awaited jobs keep their default hour
POLICY = {"succeeded": 0, "failed": 0, "dead": 0, "cancelled": 0}


def enqueue(conn: psycopg.Connection[Any], specs: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for i in range(0, len(specs), BATCH):
        rows = conn.execute("select id from jobs.enqueue_many(%s) order by ord",
                            (json.dumps(specs[i:i + BATCH]),)).fetchall()
        ids += [r[0] for r in rows]
    return ids


def claim(conn: psycopg.Connection[Any], queue: str, n: int) -> list[tuple[int, int]]:
    rows = conn.execute("select id, claim from jobs.claim(%s, 'w', %s, 600)",
                        ([queue], n)).fetchall()
    return [(r[0], r[1]) for r in rows]


def settle(conn: psycopg.Connection[Any], jobs: list[tuple[int, int]], how: str) -> None:
    """how: succeeded | failed | dead (max_attempts 1) | awaited (watched, then acked) |
    stepped (a stored step, then acked) | running (left running)."""
    if not jobs or how == "running":
        return
    ids, claims = [j[0] for j in jobs], [j[1] for j in jobs]
    if how == "awaited":
        conn.execute("select count(*) from jobs.job j, lateral jobs.watch_outcome(j.id) w "
                     "where j.id = any(%s)", (ids,))
    if how == "stepped":
        conn.execute("select count(jobs.step_put(u.id, u.claim, 's1', '{\"v\": 1}')) "
                     "from unnest(%s::bigint[], %s::bigint[]) u(id, claim)", (ids, claims))
    if how in ("succeeded", "awaited", "stepped"):
        rows = conn.execute("select ok from jobs.ack_many(%s, %s)", (ids, claims)).fetchall()
    else:
        mode = "fail" if how == "failed" else "retry"
        rows = conn.execute("select ok from jobs.nack_many(%s, %s, null, %s)",
                            (ids, claims, [mode] * len(ids))).fetchall()
    assert all(r[0] for r in rows)


def one_cycle(conn: psycopg.Connection[Any], cycle: int) -> None:
    """10,000 jobs in queue bulk: claimed in batches, settled by their place in the batch;
    1,000 of them not claimed (ready, 500 later cancelled)."""
    specs = [{"name": "ret.job", "key": f"c{cycle}-{i}", "queue": "bulk", "max_attempts": 1}
             for i in range(PER_CYCLE - 1000)]
    specs += [{"name": "ret.job", "key": f"c{cycle}-later-{i}", "queue": "bulk-later",
               "delay_s": 3600} for i in range(1000)]
    enqueue(conn, specs)
    ways = ["succeeded", "succeeded", "succeeded", "failed", "dead", "awaited", "stepped",
            "running", "succeeded"]
    for batch_no in range((PER_CYCLE - 1000) // BATCH):
        claimed = claim(conn, "bulk", BATCH)
        assert len(claimed) == BATCH
        settle(conn, claimed, ways[batch_no % len(ways)])
    conn.execute("select count(jobs.cancel(j.id)) from (select id from jobs.job where "
                 "queue = 'bulk-later' and state = 'ready' and key like %s order by id "
                 "limit 500) j", (f"c{cycle}-later-%",))


def parents_and_children(conn: psycopg.Connection[Any], cycle: int) -> None:
    """Ten parents that each invoke a child: 4 children succeed (their parents wake, live),
    3 parents are cancelled with their child still live, 3 stay parked."""
    enqueue(conn, [{"name": "ret.parent", "key": f"p{cycle}-{i}", "queue": f"parents-{cycle}"}
                   for i in range(10)])
    for n, (pid, token) in enumerate(claim(conn, f"parents-{cycle}", 10)):
        conn.execute("select * from jobs.step_invoke(%s, %s, array['child'], %s)",
                     (pid, token, json.dumps([{"name": "ret.child", "key": f"ch{cycle}-{n}",
                                               "queue": f"children-{cycle}-{n % 3}"}])))
    done = claim(conn, f"children-{cycle}-0", 10)  # the children of parents 0, 3, 6, 9
    assert len(done) == 4
    settle(conn, done, "succeeded")
    conn.execute("select count(jobs.cancel(p.id)) from jobs.job p where p.state = 'parked' "
                 "and exists (select 1 from jobs.job c where c.parent_id = p.id "
                 "and c.queue = %s)", (f"children-{cycle}-1",))


def through_the_outbox(conn: psycopg.Connection[Any], cycle: int) -> None:
    """100 staged jobs, published and run."""
    conn.execute("select jobs.stage_many(%s)", (json.dumps(
        [{"name": "ret.staged", "key": f"o{cycle}-{i}", "queue": "staged"}
         for i in range(100)]),))
    conn.execute("select jobs.relay(1000, 'relay', 30)")
    conn.execute("select jobs.relay(0, 'relay', 30)")
    settle(conn, claim(conn, "staged", 100), "succeeded")


def must_keep(conn: psycopg.Connection[Any]) -> tuple[set[int], set[int]]:
    """(every job id, the ids the rules keep), from a snapshot: live jobs, awaited jobs
    (finished within the awaited hour), parents with a live child, children of a live
    parent."""
    rows = conn.execute("select id, state::text, settle_watched, parent_id from jobs.job"
                        ).fetchall()
    state = {r[0]: r[1] for r in rows}
    live_parents = {r[3] for r in rows if r[1] in LIVE and r[3] is not None}
    keep = {
        r[0] for r in rows
        if r[1] in LIVE or r[2] or r[0] in live_parents
        or (r[3] is not None and state.get(r[3]) in LIVE)
    }
    return set(state), keep


def purge_until_done(conn: psycopg.Connection[Any]) -> int:
    deleted, calls = 0, 0
    while True:
        result = Client(conn).run(queries.purge(PURGE_BATCH, False, POLICY))
        assert result.jobs + result.events <= PURGE_BATCH, "a call deleted more than its bound"
        deleted += result.jobs
        calls += 1
        if result.remaining == 0:
            return deleted
        assert result.deleted > 0, "eligible rows left, but the call took none"
        assert calls < 1000


def test_fifty_thousand_jobs_through_purge_cycles(conn: psycopg.Connection[Any]) -> None:
    conn.execute("set jobs.notify = off")
    for cycle in range(CYCLES):
        one_cycle(conn, cycle)
        parents_and_children(conn, cycle)
        through_the_outbox(conn, cycle)
        everything, keep = must_keep(conn)
        steps_kept = scalar(conn, "select count(*) from jobs.step where job_id = any(%s)",
                            (list(keep),))
        dry = conn.execute("select remaining from jobs.purge(1, true, %s) where what = 'job'",
                           (json.dumps(POLICY),)).fetchone()
        assert dry is not None and dry[0] == len(everything - keep), "the dry run's count"

        deleted = purge_until_done(conn)

        left = {r[0] for r in conn.execute("select id from jobs.job").fetchall()}
        assert left == keep, (f"cycle {cycle}: {len(keep - left)} kept jobs were purged, "
                              f"{len(left - keep)} eligible ones stayed")
        assert deleted == len(everything - keep)
        assert scalar(conn, "select count(*) from jobs.step where job_id = any(%s)",
                      (list(keep),)) == steps_kept, "steps of kept jobs are untouched"
        assert scalar(conn, "select count(*) from jobs.step s where not exists "
                            "(select 1 from jobs.job j where j.id = s.job_id)") == 0
        assert scalar(conn, "select count(*) from jobs.outbox o where o.outcome = 'created' "
                            "and not exists (select 1 from jobs.job j where j.id = o.id)") == 0, \
            "an outbox row went with the job it created"
    # what the cycles left: per cycle 1,000 running, 1,000 awaited, 500 ready, and the
    # parents and children the rules hold
    states = dict(conn.execute("select state::text, count(*) from jobs.job group by 1").fetchall())
    assert states["running"] == CYCLES * 1000
    assert states["ready"] >= CYCLES * 500
    assert scalar(conn, "select count(*) from jobs.job where settle_watched") == CYCLES * 1000
    assert scalar(conn, "select count(*) from jobs.job where name = 'ret.parent' "
                        "and state = 'cancelled'") == CYCLES * 3, "parents of live children"
    assert scalar(conn, "select count(*) from jobs.job where name = 'ret.child' "
                        "and state = 'succeeded'") == CYCLES * 4, "children of live parents"
    # once the awaited hour has passed, the awaited jobs go too
    conn.execute("select set_config('jobs.fake_now', (now() + interval '61 minutes')::text, false)")
    purge_until_done(conn)
    assert scalar(conn, "select count(*) from jobs.job where settle_watched") == 0
    assert scalar(conn, "select count(*) from jobs.job where state = 'running'") == CYCLES * 1000


# -- the scheduler's leader --------------------------------------------------------------


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    example = App(db_dsn)
    yield example
    example.close()


def finished_jobs(conn: psycopg.Connection[Any], n: int, queue: str) -> None:
    enqueue(conn, [{"name": "ret.sched", "key": f"{queue}-{i}", "queue": queue}
                   for i in range(n)])
    settle(conn, claim(conn, queue, n), "succeeded")


def test_the_scheduler_leader_purges_one_bounded_batch_per_tick(
        app: App, conn: psycopg.Connection[Any]) -> None:
    conn.execute("select jobs.retention_put('*', '{\"succeeded\": 0}')")
    finished_jobs(conn, 250, "done")
    enqueue(conn, [{"name": "ret.sched", "key": "live", "queue": "live"}])
    scheduler = Scheduler(app, install_signals=False, tick=0.05, purge_every=3600,
                          purge_batch=100)
    seen: list[int] = []

    async def main() -> None:
        task = asyncio.create_task(scheduler.run_async())
        for _ in range(2000):
            await asyncio.sleep(0.05)
            assert not task.done(), "the scheduler stopped early"
            seen.append(scheduler.counts["purged"])
            if scheduler.counts["purged"] >= 250:
                break
        scheduler.stop()
        assert await task == 0

    asyncio.run(main())
    assert scheduler.counts["purged"] == 250
    steps = sorted(set(seen))
    assert all(b - a <= 100 for a, b in itertools.pairwise(steps)), \
        "the backlog went in batches of at most purge_batch, one per tick"
    assert len(steps) >= 3, "three batches: 100, 100, 50"
    assert scalar(conn, "select count(*) from jobs.job where state = 'succeeded'") == 0
    assert scalar(conn, "select count(*) from jobs.job where key = 'live'") == 1


def test_a_scheduler_with_purging_disabled_purges_nothing(
        app: App, conn: psycopg.Connection[Any]) -> None:
    conn.execute("select jobs.retention_put('*', '{\"succeeded\": 0}')")
    finished_jobs(conn, 10, "kept")
    scheduler = Scheduler(app, install_signals=False, purge_every=None)

    async def main() -> tuple[int | None, int | None]:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as c:
            scheduler._client = AsyncClient(c)
            assert await scheduler.acquire()
            disabled = await scheduler.purge_round()
            scheduler.purge_every = 60.0  # the same leader with purging on
            enabled = await scheduler.purge_round()
            return disabled, enabled

    assert asyncio.run(main()) == (None, 10)
    assert scalar(conn, "select count(*) from jobs.job") == 0


def test_only_the_leader_purges(app: App, conn: psycopg.Connection[Any]) -> None:
    conn.execute("select jobs.retention_put('*', '{\"succeeded\": 0}')")
    finished_jobs(conn, 10, "led")
    leader = Scheduler(app, install_signals=False, scheduler_id="leader")
    standby = Scheduler(app, install_signals=False, scheduler_id="standby")

    async def main() -> tuple[int | None, int | None]:
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as c:
            leader._client = standby._client = AsyncClient(c)
            assert await leader.acquire()
            assert not await standby.acquire()
            return await standby.purge_round(), await leader.purge_round()

    assert asyncio.run(main()) == (None, 10)
