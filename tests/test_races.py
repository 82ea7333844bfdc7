"""Races across real sessions (STYLE 9, 11): what pgTAP, one transaction, cannot see.

Every test here opens several psycopg connections, each used by one thread, and lets
them collide on the same rows. Interleavings are either forced (one session holds a lock
while pg_stat_activity shows the other waiting) or left to the scheduler and repeated;
the assertions hold for every interleaving, never for a timing.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import psycopg
import psycopg.errors
import pytest

from sqljobs import Client, LeaseLost
from sqljobs._client import queries
from sqljobs._client.records import ClaimedJob, Enqueued, JobSpec
from tests.helpers_db import run_together, session, wait_until_blocked_on_lock

T0 = datetime(2100, 1, 1, tzinfo=UTC)  # after any real now: enqueued jobs are due
LEASE_S = 10.0
AFTER_LEASE = T0 + timedelta(seconds=LEASE_S + 1)


def enqueue_one(conn: psycopg.Connection[Any], key: str, **options: Any) -> int:
    return Client(conn).run(queries.enqueue("race", key, {}, options)).id


def job_row(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    """(state, attempt, which claim of the job holds it: its token's high half, result)."""
    row = conn.execute(
        "select state::text, attempt, claim >> 32, result from jobs.job where id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


# -- many workers, many jobs ---------------------------------------------------------------


def test_eight_sessions_claim_ten_thousand_jobs_each_exactly_once(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    client = Client(conn)
    for chunk in range(10):
        specs = [JobSpec(name="bulk", key=f"k{chunk * 1000 + i}", queue="bulk")
                 for i in range(1000)]
        answers = client.run(queries.enqueue_many(specs))
        assert [a.outcome for a in answers] == ["created"] * 1000

    def worker(n: int) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        with session(db_dsn) as own:
            mine = Client(own)
            while True:
                jobs = mine.run(queries.claim(["bulk"], f"w{n}", 50, 60.0))
                if not jobs:
                    # Skip locked: an empty answer means no unlocked ready row was left;
                    # any row another session had locked is claimed by that session.
                    return got
                got.extend((j.id, j.claim) for j in jobs)
                held = {j.id: j.claim for j in jobs}
                while held:  # a busy row (another claim's scan held it) is sent again
                    settled = mine.run(queries.ack_many(list(held), list(held.values())))
                    assert not any(s.ok is False for s in settled)
                    held = {s.id: held[s.id] for s in settled if s.busy}

    per_session = run_together([lambda n=n: worker(n) for n in range(8)])

    claims = [pair for got in per_session for pair in got]
    ids = Counter(job_id for job_id, _ in claims)
    assert len(claims) == 10_000
    assert len(ids) == 10_000, [i for i, n in ids.items() if n > 1][:10]
    assert {claim >> 32 for _, claim in claims} == {1}  # every job claimed once
    assert conn.execute(
        "select state::text, claim >> 32, attempt, count(*) from jobs.job group by 1, 2, 3"
    ).fetchall() == [("succeeded", 1, 1, 10_000)]


# -- a stale ack against lease expiry and re-claim -------------------------------------------


def test_stale_ack_after_reclaim_raises_lease_lost(conn: psycopg.Connection[Any],
                                                   db_dsn: str) -> None:
    job_id = enqueue_one(conn, "lapse")
    with session(db_dsn, T0) as first, session(db_dsn, AFTER_LEASE) as second:
        [held] = Client(first).run(queries.claim(["default"], "first", 1, LEASE_S))
        assert (held.id, held.claim >> 32) == (job_id, 1)

        # The second session's clock is past the lease: its claim recovers the job
        # (attempt counted) and claims it again under a new token.
        [taken] = Client(second).run(queries.claim(["default"], "second", 1, LEASE_S))
        assert (taken.id, taken.claim >> 32, taken.attempt) == (job_id, 2, 2)

        with pytest.raises(LeaseLost) as lost:
            Client(first).run(queries.ack(job_id, held.claim, {"by": "first"}))
        assert lost.value.detail == "the job runs under another claim"  # never its token
        assert job_row(conn, job_id) == ("running", 2, 2, None)

        Client(second).run(queries.ack(job_id, taken.claim, {"by": "second"}))
    assert job_row(conn, job_id) == ("succeeded", 2, 2, {"by": "second"})


def _claimed_with_lapsing_lease(db_dsn: str, conn: psycopg.Connection[Any],
                                key: str) -> ClaimedJob:
    """A job claimed at T0 under a lease that has lapsed by AFTER_LEASE."""
    enqueue_one(conn, key)
    with session(db_dsn, T0) as first:
        [held] = Client(first).run(queries.claim(["default"], "first", 1, LEASE_S))
    return held


def test_ack_holding_the_row_makes_the_reclaim_skip_it(conn: psycopg.Connection[Any],
                                                        db_dsn: str) -> None:
    """Forced order 1: the old claim's ack locks the row first; the claim must not wait."""
    held = _claimed_with_lapsing_lease(db_dsn, conn, "ack-first")
    with session(db_dsn) as acker, session(db_dsn, AFTER_LEASE) as claimer:
        claimer.execute("set lock_timeout = '2s'")  # a wait would raise, not hang
        with acker.transaction():
            Client(acker).run(queries.ack(held.id, held.claim, "acker"))
            assert Client(claimer).run(queries.claim(["default"], "claimer", 1, LEASE_S)) == []
    assert job_row(conn, held.id) == ("succeeded", 1, 1, "acker")


def test_reclaim_holding_the_row_makes_the_stale_ack_lose(conn: psycopg.Connection[Any],
                                                          db_dsn: str) -> None:
    """Forced order 2: the re-claim locks the row first; the ack waits, then loses."""
    held = _claimed_with_lapsing_lease(db_dsn, conn, "claim-first")
    with (
        session(db_dsn) as acker,
        session(db_dsn, AFTER_LEASE) as claimer,
        session(db_dsn) as observer,
    ):
        claimer.execute("begin")
        [taken] = Client(claimer).run(queries.claim(["default"], "claimer", 1, LEASE_S))
        assert taken.claim > held.claim

        def stale_ack() -> LeaseLost | None:
            try:
                Client(acker).run(queries.ack(held.id, held.claim, "acker"))
            except LeaseLost as error:
                return error
            return None

        def commit_once_the_ack_waits() -> None:
            try:
                wait_until_blocked_on_lock(observer, acker.info.backend_pid)
            finally:
                claimer.execute("commit")

        outcome, _ = run_together([stale_ack, commit_once_the_ack_waits])
        assert isinstance(outcome, LeaseLost)
        Client(claimer).run(queries.ack(held.id, taken.claim, "claimer"))
    assert job_row(conn, held.id) == ("succeeded", 2, 2, "claimer")


def test_ack_and_reclaim_at_the_same_moment_have_exactly_one_winner(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    outcomes: Counter[str] = Counter()
    with session(db_dsn, T0) as first, session(db_dsn, AFTER_LEASE) as second:
        for rep in range(50):
            job_id = enqueue_one(conn, f"same-moment-{rep}")
            [held] = Client(first).run(queries.claim(["default"], "first", 1, LEASE_S))
            assert held.id == job_id

            def ack_old(held: ClaimedJob = held) -> bool:
                try:
                    Client(first).run(queries.ack(held.id, held.claim, "first"))
                except LeaseLost:
                    return False
                return True

            def reclaim() -> list[ClaimedJob]:
                return Client(second).run(queries.claim(["default"], "second", 1, LEASE_S))

            acked, reclaimed = run_together([ack_old, reclaim])
            assert acked != bool(reclaimed), (rep, acked, reclaimed)
            if acked:
                outcomes["ack won"] += 1
                assert job_row(conn, job_id) == ("succeeded", 1, 1, "first")
            else:
                outcomes["claim won"] += 1
                [taken] = reclaimed
                assert (taken.id, taken.claim >> 32, taken.attempt) == (job_id, 2, 2)
                assert job_row(conn, job_id) == ("running", 2, 2, None)
                Client(second).run(queries.ack(job_id, taken.claim, "second"))
                assert job_row(conn, job_id) == ("succeeded", 2, 2, "second")
    assert outcomes.total() == 50
    unsettled = conn.execute("select count(*) from jobs.job where state <> 'succeeded'")
    assert unsettled.fetchone() == (0,)


# -- enqueue against enqueue ---------------------------------------------------------------


def test_two_enqueues_of_one_key_make_one_job(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    with session(db_dsn) as a, session(db_dsn) as b:
        for rep in range(100):
            key = f"twin-{rep}"
            answers: list[Enqueued] = run_together([
                lambda c=c, key=key: Client(c).run(queries.enqueue("twin", key, {"by": 1}, {}))
                for c in (a, b)
            ])
            assert sorted(x.outcome for x in answers) == ["created", "deduped"], rep
            assert answers[0].id == answers[1].id
            rows = conn.execute("select id from jobs.job where name = 'twin' and key = %s",
                                (key,)).fetchall()
            assert rows == [(answers[0].id,)]


def test_batches_and_single_enqueues_of_shared_keys_neither_duplicate_nor_deadlock(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    rng = random.Random(20300101)
    keys = [f"k{i:03}" for i in range(240)]

    def batches(name: str, order: list[str]) -> list[tuple[str, Enqueued]]:
        answers: list[tuple[str, Enqueued]] = []
        with session(db_dsn) as own:
            for start in range(0, len(order), 40):
                chunk = order[start:start + 40]
                chunk = chunk + chunk[:3]  # a key repeated inside the batch, too
                got = Client(own).run(queries.enqueue_many(
                    [JobSpec(name=name, key=k, payload={"k": k}) for k in chunk]))
                answers.extend(zip(chunk, got, strict=True))
        return answers

    def shared_spec_batches(name: str, order: list[str]) -> list[tuple[str, Enqueued]]:
        # jobs.enqueue_batch: its own insert (jobs.insert_batch), in the same lock order
        answers: list[tuple[str, Enqueued]] = []
        with session(db_dsn) as own:
            for start in range(0, len(order), 40):
                chunk = order[start:start + 40]
                chunk = chunk + chunk[:3]
                got = Client(own).run(queries.enqueue_batch({"name": name}, chunk))
                answers.extend(zip(chunk, got, strict=True))
        return answers

    def singles(name: str, order: list[str]) -> list[tuple[str, Enqueued]]:
        with session(db_dsn) as own:
            return [(k, Client(own).run(queries.enqueue(name, k, {"k": k}, {}))) for k in order]

    for round_ in range(3):
        name = f"mixed-{round_}"
        work: list[Callable[[], list[tuple[str, Enqueued]]]] = []
        for _ in range(6):
            work.append(partial(batches, name, rng.sample(keys, 160)))
            work.append(partial(shared_spec_batches, name, rng.sample(keys, 160)))
            work.append(partial(singles, name, rng.sample(keys, 80)))
        try:
            results = run_together(work)
        except psycopg.errors.DeadlockDetected as error:  # pragma: no cover - the bug
            pytest.fail(f"enqueue deadlocked: {error}")

        table = dict(conn.execute(
            "select key, id from jobs.job where name = %s", (name,)).fetchall())
        assert conn.execute("select count(*) from jobs.job where name = %s",
                            (name,)).fetchone() == (len(table),)
        created: Counter[str] = Counter()
        answered: dict[str, set[int]] = defaultdict(set)
        for key, answer in (pair for result in results for pair in result):
            answered[key].add(answer.id)
            created[key] += answer.outcome == "created"
        assert set(answered) == set(table)
        assert all(ids == {table[k]} for k, ids in answered.items())
        assert all(created[k] == 1 for k in table), [k for k in table if created[k] != 1]


@pytest.mark.parametrize("call", ["enqueue_many", "enqueue_batch"])
def test_a_batch_waiting_on_its_group_holds_no_key_that_the_group_holder_then_enqueues(
    conn: psycopg.Connection[Any], db_dsn: str, call: str
) -> None:
    """A batch whose singleton group has an uncommitted job elsewhere waits for that
    transaction holding none of its keys, so the transaction can still enqueue one of them
    and commit. (A batch's plain insert, jobs.batch_write, writes a row's key entry before
    it waits on the group: a batch with grouped rows takes ON CONFLICT at once.)"""
    name = f"grp-{call}"
    single = {"singleton": True, "group_key": "g"}
    with session(db_dsn) as holder, session(db_dsn) as batcher:
        answers: list[list[Enqueued]] = []
        with holder.transaction():
            Client(holder).run(queries.enqueue(name, "held", {}, single))
            if call == "enqueue_many":
                batch = queries.enqueue_many([JobSpec(name=name, key="k", **single),
                                              JobSpec(name=name, key="z")])
            else:
                batch = queries.enqueue_batch({"name": name, **single}, ["k", "z"])
            waiting = threading.Thread(target=lambda: answers.append(Client(batcher).run(batch)))
            waiting.start()
            wait_until_blocked_on_lock(conn, batcher.info.backend_pid)
            try:  # the batch's key, in the transaction the batch waits for
                Client(holder).run(queries.enqueue(name, "k", {}, {}))
            except psycopg.errors.DeadlockDetected as error:  # pragma: no cover - the bug
                pytest.fail(f"enqueue deadlocked: {error}")
        waiting.join()
    table = dict(conn.execute("select key, id from jobs.job where name = %s", (name,)).fetchall())
    assert [(e.id, e.outcome) for e in answers[0]] == (
        [(table["k"], "deduped"), (table["z"], "created")] if call == "enqueue_many"
        else [(table["k"], "deduped"), (table["held"], "deduped")])


# -- skip locked ---------------------------------------------------------------------------


def test_a_row_lock_held_elsewhere_does_not_block_claim(conn: psycopg.Connection[Any],
                                                        db_dsn: str) -> None:
    ids = [enqueue_one(conn, f"lock-{i}", priority=i) for i in range(5)]
    first = ids[0]  # the claim would take this one first
    with session(db_dsn) as locker, session(db_dsn) as claimer:
        claimer.execute("set lock_timeout = '2s'")  # a lock wait would raise, not hang
        with locker.transaction():
            locker.execute("select id from jobs.job where id = %s for update", (first,))
            jobs = Client(claimer).run(queries.claim(["default"], "w", 10, 30.0))
            # Answered while the lock is still held: the claim skipped the row.
            assert locker.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            assert [j.id for j in jobs] == ids[1:]
        [late] = Client(claimer).run(queries.claim(["default"], "w", 10, 30.0))
    assert late.id == first


def test_a_lapsed_lease_locked_elsewhere_does_not_block_recovery(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    lapsed = [_claimed_with_lapsing_lease(db_dsn, conn, f"lapsed-{i}").id for i in range(2)]
    with session(db_dsn) as locker, session(db_dsn, AFTER_LEASE) as claimer:
        claimer.execute("set lock_timeout = '2s'")
        with locker.transaction():
            locker.execute("select id from jobs.job where id = %s for update", (lapsed[0],))
            jobs = Client(claimer).run(queries.claim(["default"], "w", 10, 30.0))
            assert [(j.id, j.claim >> 32) for j in jobs] == [(lapsed[1], 2)]
            assert job_row(conn, lapsed[0])[:3] == ("running", 1, 1)
        [late] = Client(claimer).run(queries.claim(["default"], "w", 10, 30.0))
    assert (late.id, late.claim >> 32, late.attempt) == (lapsed[0], 2, 2)
