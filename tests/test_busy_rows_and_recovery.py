"""A row another session holds locked does not stall a worker's batch, and lapsed
leases are recovered while every worker is busy (the two defects the chaos suite's
idle-lock and recovery-tail figures showed; sql/40_settle.sql "Busy rows",
jobs.recover in sql/30_claim.sql).

The batch functions skip a locked row and answer ok = null for it ("busy": nothing
written, call again); the one-job functions wait for the lock. A worker whose slots are
all taken calls jobs.recover on its poll instead of claiming.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, InvalidArgument, JobContext, fresh_key
from sqljobs._client import queries
from sqljobs._client.connection import Client
from tests.processes import scalar, wait_for, wait_for_lock_wait
from tests.worker_helpers import running

QUEUE = "busy"


def claimed(conn: psycopg.Connection[Any], n: int, lease_s: float = 30.0) -> list[Any]:
    client = Client(conn)
    for _ in range(n):
        client.run(queries.enqueue("busy.job", fresh_key(), {}, {"queue": QUEUE}))
    return client.run(queries.claim([QUEUE], "w", n, lease_s))


def state(conn: psycopg.Connection[Any], job_id: int) -> str:
    return str(scalar(conn, "select state::text from jobs.job where id = %s", (job_id,)))


@pytest.fixture
def locker(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session that holds row locks in an open transaction (an operator's, a
    report's), as the chaos suite's idle-lock fault does."""
    with psycopg.connect(db_dsn) as conn:
        yield conn


def lock_row(locker: psycopg.Connection[Any], job_id: int) -> None:
    locker.execute("select id from jobs.job where id = %s for update", (job_id,))


@pytest.fixture
def worker_conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # a batch that waited for the lock would fail here after a minute, not answer
        conn.execute("set lock_timeout = '60s'")
        yield conn


def test_a_batch_settles_what_is_not_locked_and_answers_busy_for_the_rest(
        conn: psycopg.Connection[Any], locker: psycopg.Connection[Any],
        worker_conn: psycopg.Connection[Any]) -> None:
    jobs = claimed(conn, 3)
    ids, claims = [j.id for j in jobs], [j.claim for j in jobs]
    lock_row(locker, ids[1])
    client = Client(worker_conn)
    assert [b.ok for b in client.run(queries.heartbeat_many(ids, claims, 30.0))] == [
        True, None, True]
    assert client.run(queries.heartbeat(ids[1], claims[1])) is None
    assert [a.ok for a in client.run(queries.ack_many(ids, claims, ["a", "b", "c"]))] == [
        True, None, True]
    assert [state(conn, i) for i in ids] == ["succeeded", "running", "succeeded"]
    # the answer still tells a lost fence from a busy row: a wrong token is false
    assert [n.ok for n in client.run(queries.nack_many([ids[1], ids[1]],
                                                       [claims[1], claims[1] + 1]))] == [
        None, False]
    locker.rollback()
    assert [a.ok for a in client.run(queries.ack_many([ids[1]], [claims[1]], ["b"]))] == [True]
    assert state(conn, ids[1]) == "succeeded"


def test_a_batch_ack_that_waits_on_more_than_its_rows_is_redone_and_answers_the_same(
        conn: psycopg.Connection[Any], locker: psycopg.Connection[Any],
        worker_conn: psycopg.Connection[Any]) -> None:
    """ack_many writes first, allowing 50 ms for a lock; a longer wait on anything but
    its own rows (a table lock here, as a trigger's wait on another row would be) undoes
    that write, and the lock pass's way writes the batch, waiting as a plain UPDATE does."""
    jobs = claimed(conn, 2)
    ids, claims = [j.id for j in jobs], [j.claim for j in jobs]
    locker.execute("lock table jobs.job in share mode")  # no update of jobs.job until released
    answers: list[Any] = []
    acking = threading.Thread(target=lambda: answers.extend(
        Client(worker_conn).run(queries.ack_many(ids, claims, ["a", "b"]))))
    acking.start()
    # the lock pass runs only after the first write gave up: its row locks hold the
    # table in ROW SHARE mode, while its write waits for the table like the first one
    wait_for(lambda: scalar(conn, "select count(*) = 1 from pg_locks where pid = %s "
                                  "and relation = 'jobs.job'::regclass "
                                  "and mode = 'RowShareLock' and granted",
                            (worker_conn.info.backend_pid,)),
             "the batch to take the lock pass's way")
    assert [state(conn, i) for i in ids] == ["running", "running"]
    locker.rollback()
    acking.join(timeout=60)
    assert [a.ok for a in answers] == [True, True]
    assert [state(conn, i) for i in ids] == ["succeeded", "succeeded"]
    assert worker_conn.execute("show lock_timeout").fetchone() == ("1min",)


def test_the_one_job_ack_waits_for_the_lock_and_then_settles(
        conn: psycopg.Connection[Any], db_dsn: str, locker: psycopg.Connection[Any]) -> None:
    [job] = claimed(conn, 1)
    lock_row(locker, job.id)
    outcome: dict[str, Any] = {}

    def ack() -> None:
        with psycopg.connect(db_dsn, autocommit=True) as worker:
            try:
                Client(worker).run(queries.ack(job.id, job.claim, "done"))
                outcome["acked"] = True
            except BaseException as error:  # reported by the assertion below
                outcome["error"] = error

    thread = threading.Thread(target=ack)
    thread.start()
    try:
        wait_for_lock_wait(conn, "%jobs.ack(%", "the ack to wait for the row lock")
    finally:
        locker.rollback()
        thread.join(60)
    assert outcome == {"acked": True}
    assert state(conn, job.id) == "succeeded"


def lapsed(conn: psycopg.Connection[Any], job_id: int) -> bool:
    return bool(scalar(conn, "select lease_expires_at < clock_timestamp() from jobs.job "
                             "where id = %s", (job_id,)))


@pytest.mark.parametrize("verb", ["ack_many", "nack_many"])
def test_a_held_settle_key_keeps_lease_recovery_off_a_busy_job(
        conn: psycopg.Connection[Any], db_dsn: str, locker: psycopg.Connection[Any],
        verb: str) -> None:
    [job] = claimed(conn, 1, lease_s=0.2)
    wait_for(lambda: lapsed(conn, job.id), "the lease to lapse")
    lock_row(locker, job.id)  # (this transaction's clock reads the lease as lapsed)
    with psycopg.connect(db_dsn, autocommit=True) as worker, \
            psycopg.connect(db_dsn) as holder:
        client = Client(worker)

        def settle() -> list[Any]:
            if verb == "ack_many":
                return client.run(queries.ack_many([job.id], [job.claim], ["r"]))
            return client.run(queries.nack_many([job.id], [job.claim]))

        assert [a.ok for a in settle()] == [None]  # busy: its settle key is made
        assert Client(holder).run(queries.settle_hold([job.id], [job.claim])) == [job.id]
        # The locker holds the row, so its own recovery is not kept off by skip
        # locked: only the held settle key keeps it off.
        assert scalar(locker, "select jobs.recover(array[%s])", (QUEUE,)) == 0
        holder.rollback()  # the key released: now the same recovery takes the job
        assert scalar(locker, "select jobs.recover(array[%s])", (QUEUE,)) == 1
        locker.commit()
        assert [a.ok for a in settle()] == [False]  # recovered: no longer this claim's
        assert scalar(conn, "select state::text || ' ' || attempt from jobs.job "
                            "where id = %s", (job.id,)) == "ready 1"


def test_only_a_running_jobs_settle_key_under_its_claim_is_held(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    running_job, finished = claimed(conn, 2)
    conn.execute("insert into jobs.lock_key (key, created_at) "
                 "select jobs.settle_key(id, claim), now() from jobs.job where id = any(%s)",
                 ([running_job.id, finished.id],))
    Client(conn).run(queries.ack(finished.id, finished.claim))
    [other] = claimed(conn, 1)  # no key: no busy answer made one
    waiting = "select jobs.settle_waiting(%s, %s)"
    with psycopg.connect(db_dsn) as holder:
        held = Client(holder).run(queries.settle_hold(
            [running_job.id, running_job.id, finished.id, other.id],
            [running_job.claim + 1, running_job.claim, finished.claim, other.claim]))
        assert held == [running_job.id]
        # a holder that goes idle is ended after 10 s, and its keys with it
        assert scalar(holder, "show idle_in_transaction_session_timeout") == "10s"
        assert scalar(conn, waiting, (running_job.id, running_job.claim)) is True
        assert scalar(conn, waiting, (running_job.id, running_job.claim + 1)) is False
        assert scalar(conn, waiting, (other.id, other.claim)) is False
    assert scalar(conn, waiting, (running_job.id, running_job.claim)) is False
    with psycopg.connect(db_dsn) as holder:
        holder.execute("set transaction isolation level repeatable read")
        with pytest.raises(InvalidArgument, match="READ COMMITTED"):
            Client(holder).run(queries.settle_hold([running_job.id], [running_job.claim]))


def test_naming_a_job_under_a_claim_not_its_own_locks_nothing(
        conn: psycopg.Connection[Any], db_dsn: str, worker_conn: psycopg.Connection[Any]
        ) -> None:
    [job] = claimed(conn, 1)
    with psycopg.connect(db_dsn) as other:  # a transaction left open after the call
        assert [h.ok for h in Client(other).run(
            queries.heartbeat_many([job.id], [job.claim + 1], 30.0))] == [False]
        # the row is not pinned: its holder's ack is not busy
        assert [a.ok for a in Client(worker_conn).run(
            queries.ack_many([job.id], [job.claim]))] == [True]


class Nap(BaseModel):
    release: str = ""


def busy_app(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="busy.hold", queue=QUEUE)
    async def hold(ctx: JobContext, payload: Nap) -> str:
        # runs until the test says so: it holds the worker's only slot meanwhile
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as side:
            while not (await (await side.execute(
                    "select count(*) from public.busy_release where name = %s",
                    (payload.release,))).fetchone() or (0,))[0]:
                await asyncio.sleep(0.05)
        return payload.release

    return app


@pytest.fixture
def release_table(conn: psycopg.Connection[Any]) -> Iterator[None]:
    conn.execute("create table if not exists public.busy_release (name text)")
    yield
    conn.execute("drop table public.busy_release")


def test_a_locked_row_does_not_hold_back_the_rest_of_a_workers_acks(
        db_dsn: str, conn: psycopg.Connection[Any], locker: psycopg.Connection[Any],
        release_table: None) -> None:
    app = busy_app(db_dsn)
    handle = app.job_handle("busy.hold")
    try:
        with running(app, concurrency=4, lease_s=30.0):
            ids = [handle.enqueue({"release": "go"}, key=fresh_key()).id for _ in range(4)]
            wait_for(lambda: scalar(conn, "select count(*) = 4 from jobs.job where id = any(%s) "
                                          "and state = 'running'", (ids,)),
                     "the four jobs to run")
            lock_row(locker, ids[0])
            conn.execute("insert into public.busy_release values ('go')")
            # the other three settle while the first one's row is still locked
            wait_for(lambda: scalar(conn, "select count(*) = 3 from jobs.job "
                                          "where id = any(%s) and state = 'succeeded'",
                                    (ids[1:],)),
                     "the three unlocked jobs to succeed")
            assert state(conn, ids[0]) == "running"
            locker.rollback()
            wait_for(lambda: state(conn, ids[0]) == "succeeded", "the fourth, once unlocked")
    finally:
        app.close()
    # each ran once, under its first claim
    assert conn.execute("select count(*) from jobs.job where id = any(%s) and attempt = 1 "
                        "and claim >> 32 = 1", (ids,)).fetchone() == (4,)


def test_a_busy_worker_recovers_a_dead_workers_lapsed_leases_without_claiming(
        db_dsn: str, conn: psycopg.Connection[Any], release_table: None) -> None:
    app = busy_app(db_dsn)
    handle = app.job_handle("busy.hold")
    try:
        with running(app, concurrency=1, prefetch=0, poll_interval=0.2, lease_s=30.0):
            blocker = handle.enqueue({"release": "end"}, key=fresh_key()).id
            wait_for(lambda: state(conn, blocker) == "running", "the worker's only slot taken")
            # a worker that died: its claim's lease (0.5 s) lapses and nobody settles it
            orphan = handle.enqueue({"release": "end"}, key=fresh_key()).id
            taken = Client(conn).run(queries.claim([QUEUE], "dead-worker", 1, 0.5))
            assert [j.id for j in taken] == [orphan]
            # the busy worker's polls recover it while its slot is still taken
            wait_for(lambda: scalar(conn, "select state::text = 'ready' and "
                                          "last_error->>'kind' = 'lease_expired' "
                                          "from jobs.job where id = %s", (orphan,)),
                     "the orphan recovered by the busy worker")
            assert state(conn, blocker) == "running"
            conn.execute("insert into public.busy_release values ('end')")
            wait_for(lambda: state(conn, orphan) == "succeeded", "the orphan run again")
    finally:
        app.close()


def test_an_outcome_whose_row_is_locked_past_its_lease_is_written_not_run_again(
        db_dsn: str, conn: psycopg.Connection[Any], locker: psycopg.Connection[Any],
        release_table: None) -> None:
    """The chaos suite's idle-lock duplicates: the job finished, its ack found the row
    locked, its lease lapsed meanwhile; the worker holds the job's settle key, so a
    recovery the moment the lock is released leaves the job to the ack sent again."""
    app = busy_app(db_dsn)
    handle = app.job_handle("busy.hold")
    try:
        with running(app, concurrency=1, lease_s=1.0, poll_interval=0.2):
            job_id = handle.enqueue({"release": "done"}, key=fresh_key()).id
            wait_for(lambda: state(conn, job_id) == "running", "the job to run")
            lock_row(locker, job_id)
            conn.execute("insert into public.busy_release values ('done')")
            waiting = "select jobs.settle_waiting(id, claim) from jobs.job where id = %s"
            wait_for(lambda: scalar(conn, waiting, (job_id,)),
                     "the worker to hold the busy job's settle key")
            wait_for(lambda: lapsed(conn, job_id), "the lease to lapse while the row is held")
            locker.rollback()
            assert scalar(conn, "select jobs.recover(array[%s])", (QUEUE,)) == 0
            wait_for(lambda: state(conn, job_id) == "succeeded", "the ack sent again")
            wait_for(lambda: not scalar(conn, waiting, (job_id,)),
                     "the worker to let the key go once its outcome is written")
    finally:
        app.close()
    assert scalar(conn, "select attempt = 1 and claim >> 32 = 1 and attempts is null "
                        "from jobs.job where id = %s", (job_id,))


def test_a_run_whose_row_stays_locked_past_its_lease_goes_on_and_runs_once(
        db_dsn: str, conn: psycopg.Connection[Any], locker: psycopg.Connection[Any],
        release_table: None) -> None:
    """A long run whose row another session holds: its heartbeats answer busy, so its
    lease lapses; the worker holds the job's settle key instead, which keeps recovery
    off the job and keeps the run going past its lease, instead of stopping it at its
    deadline and running the job again once the lock is released."""
    app = busy_app(db_dsn)
    handle = app.job_handle("busy.hold")
    waiting = "select jobs.settle_waiting(id, claim) from jobs.job where id = %s"
    try:
        with running(app, concurrency=1, lease_s=1.0, poll_interval=0.2):
            job_id = handle.enqueue({"release": "long"}, key=fresh_key()).id
            wait_for(lambda: state(conn, job_id) == "running", "the job to run")
            lock_row(locker, job_id)
            wait_for(lambda: scalar(conn, waiting, (job_id,)),
                     "the worker to hold the job's settle key once a heartbeat is busy")
            # well past the lease on the database's clock: a run held to its lease
            # deadline would have been stopped by now
            wait_for(lambda: scalar(conn, "select lease_expires_at < clock_timestamp() "
                                          "- interval '2 s' from jobs.job where id = %s",
                                    (job_id,)), "the lease to lapse two seconds ago")
            assert scalar(conn, "select jobs.recover(array[%s])", (QUEUE,)) == 0
            locker.rollback()
            conn.execute("insert into public.busy_release values ('long')")
            wait_for(lambda: state(conn, job_id) == "succeeded", "the run to finish")
            wait_for(lambda: not scalar(conn, waiting, (job_id,)), "the key to go")
    finally:
        app.close()
    assert scalar(conn, "select attempt = 1 and claim >> 32 = 1 and attempts is null "
                        "and result = '\"long\"' from jobs.job where id = %s", (job_id,))
