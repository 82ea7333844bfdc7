"""The typed Python client: every `queries` builder through `Client` and `AsyncClient`.

Each scenario is written once, as a generator that yields `Call`s and receives their
results (or has their errors thrown in), and is driven four ways: `Client` on a
connection and on a pool, `AsyncClient` on an async connection and on an async pool.
pytest-asyncio is not used: async drivers run under `asyncio.run` in sync tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from datetime import datetime
from typing import Any

import psycopg
import psycopg.errors
import pydantic
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from sqljobs import (
    AsyncClient,
    BulkMoved,
    ClaimedJob,
    Client,
    DatabaseError,
    DuplicateJob,
    Enqueued,
    InvalidArgument,
    JobFinished,
    JobLive,
    JobNotFound,
    JobNotRequeueable,
    JobRecord,
    JobRunning,
    JobSpec,
    JobState,
    LeaseLost,
    PayloadTooLarge,
    QueuesRequired,
    QueueStats,
    Settled,
    SqljobsError,
    queries,
)
from sqljobs._client.queries import ENQUEUE_CHUNK, Call
from sqljobs._version import SCHEMA_VERSION
from tests.helpers_db import SAFETY_S

Scenario = Generator[Call[Any], Any, None]
SOURCES = ("connection", "pool", "async-connection", "async-pool")


# -- drivers -------------------------------------------------------------------------------


def _drive_sync(client: Client, scenario: Scenario) -> None:
    result: Any = None
    error: SqljobsError | None = None
    while True:
        try:
            call = scenario.send(result) if error is None else scenario.throw(error)
        except StopIteration:
            return
        result, error = None, None
        try:
            result = client.run(call)
        except SqljobsError as raised:
            error = raised


async def _drive_async(client: AsyncClient, scenario: Scenario) -> None:
    result: Any = None
    error: SqljobsError | None = None
    while True:
        try:
            call = scenario.send(result) if error is None else scenario.throw(error)
        except StopIteration:
            return
        result, error = None, None
        try:
            result = await client.run(call)
        except SqljobsError as raised:
            error = raised


def drive(source: str, dsn: str, scenario: Scenario) -> None:
    """Run a scenario through the client and source named."""
    if source == "connection":
        with psycopg.connect(dsn, autocommit=True) as conn:
            _drive_sync(Client(conn), scenario)
    elif source == "pool":
        with ConnectionPool(dsn, min_size=1, max_size=2, open=False,
                            kwargs={"autocommit": True}) as pool:
            _drive_sync(Client(pool), scenario)
    else:
        asyncio.run(_drive_async_source(source, dsn, scenario))


async def _drive_async_source(source: str, dsn: str, scenario: Scenario) -> None:
    if source == "async-connection":
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await _drive_async(AsyncClient(conn), scenario)
    else:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False,
                                       kwargs={"autocommit": True}) as pool:
            await _drive_async(AsyncClient(pool), scenario)


# -- every wrapper answers its typed model ---------------------------------------------------


def lifecycle() -> Scenario:
    created = yield queries.enqueue("mail", "first", {"to": "a"}, {"queue": "mail", "priority": 1})
    assert isinstance(created, Enqueued)
    assert created.outcome == "created" and not created.deduped
    again = yield queries.enqueue("mail", "first", {"to": "b"}, {"queue": "other"})
    assert again == Enqueued(id=created.id, outcome="deduped") and again.deduped

    specs = [JobSpec(name="mail", key=f"m{i}", queue="mail", payload={"i": i}) for i in range(3)]
    many = yield queries.enqueue_many([*specs, JobSpec(name="mail", key="first")])
    assert all(isinstance(x, Enqueued) for x in many)
    assert [x.outcome for x in many] == ["created", "created", "created", "deduped"]
    assert many[3].id == created.id

    claimed = yield queries.claim(["mail"], "w1", 10, 30.0)
    assert all(isinstance(c, ClaimedJob) for c in claimed)
    # priority 0 before 1; then run_at, then id.
    assert [c.id for c in claimed] == [many[0].id, many[1].id, many[2].id, created.id]
    j0, j1, j2, jk = claimed
    assert (jk.name, jk.queue, jk.key, jk.tenant, jk.payload) == (
        "mail", "mail", "first", None, {"to": "a"})
    assert (jk.priority, jk.attempt, jk.max_attempts, jk.claim >> 32) == (1, 1, 25, 1)
    assert isinstance(jk.lease_expires_at, datetime) and isinstance(jk.created_at, datetime)
    assert (jk.timeout_s, jk.progress, jk.traceparent) == (None, None, None)

    beat = yield queries.heartbeat(j0.id, j0.claim, 60.0)
    assert beat is True
    stale_beat = yield queries.heartbeat(j0.id, j0.claim + 1, 60.0)
    assert stale_beat is False
    beats = yield queries.heartbeat_many([j0.id, j1.id], [j0.claim, 99], 60.0)
    assert beats == [Settled(id=j0.id, ok=True), Settled(id=j1.id, ok=False)]
    noted = yield queries.progress(j0.id, j0.claim, {"pct": 50})
    assert noted is True

    acked = yield queries.ack(j0.id, j0.claim, {"sent": True})
    assert acked is None
    acks = yield queries.ack_many([j1.id, j0.id], [j1.claim, j0.claim], [{"sent": 1}, None])
    assert acks == [Settled(id=j1.id, ok=True), Settled(id=j0.id, ok=False)]
    state = yield queries.nack(j2.id, j2.claim, {"message": "boom"}, "retry", 0.0)
    assert state == "ready"
    nacks = yield queries.nack_many([jk.id], [jk.claim], [{"message": "no"}], ["fail"], [None])
    assert nacks == [Settled(id=jk.id, ok=True, state=JobState.FAILED)]

    record = yield queries.get_job(j0.id)
    assert isinstance(record, JobRecord)
    assert (record.state, record.result, record.progress, record.attempt) == (
        JobState.SUCCEEDED, {"sent": True}, {"pct": 50}, 1)
    assert record.finished_at is not None and record.lease_expires_at is None
    assert record.state.is_final
    failed = yield queries.get_job(jk.id)
    assert failed.state is JobState.FAILED
    assert failed.last_error["message"] == "no" and failed.last_error["attempt"] == 1
    payload = yield queries.job_payload(j0.id)
    assert payload == {"i": 0}
    nothing = yield queries.get_job(-1)
    assert nothing is None

    [mail] = yield queries.queue_stats()
    assert isinstance(mail, QueueStats)
    assert (mail.queue, mail.paused, mail.ready, mail.running, mail.parked, mail.interrupted,
            mail.succeeded, mail.failed, mail.dead, mail.cancelled) == (
        "mail", False, 1, 0, 0, 0, 2, 1, 0, 0)
    assert mail.oldest_ready_s >= 0

    assert (yield queries.requeue([jk.id])) is None
    requeued = yield queries.get_job(jk.id)
    assert (requeued.state, requeued.attempt, requeued.finished_at) == (JobState.READY, 0, None)
    assert (yield queries.promote(j2.id)) is None
    assert (yield queries.cancel(j2.id)) is None

    assert (yield queries.pause_queue("mail")) is None
    paused = yield queries.queue_stats()
    assert paused[0].paused is True
    assert (yield queries.claim(["mail"], "w1", 10, 30.0)) == []
    assert (yield queries.resume_queue("mail")) is None

    moved = yield queries.cancel_where({"queue": "mail"}, 10)
    assert moved == BulkMoved(moved=1, remaining=0)  # jk; j2 is cancelled already
    moved = yield queries.requeue_where({"queue": "mail", "state": "cancelled"}, 1)
    assert moved == BulkMoved(moved=1, remaining=1)
    moved = yield queries.promote_where({"name": "mail"})
    assert moved == BulkMoved(moved=0, remaining=0)  # nothing is waiting
    moved = yield queries.remove_where({"name": ["mail"], "state": "succeeded"})
    assert moved == BulkMoved(moved=2, remaining=0)
    assert (yield queries.remove(jk.id)) is None
    assert (yield queries.get_job(jk.id)) is None
    assert (yield queries.schema_version()) == SCHEMA_VERSION


def parked_without_wake_up() -> Scenario:
    yield queries.enqueue("nap", "k", {}, {})
    [job] = yield queries.claim(["default"], "w", 1, 30.0)
    assert (yield queries.nack(job.id, job.claim, None, "park")) == "parked"
    record = yield queries.get_job(job.id)  # run_at is 'infinity' in the table
    assert (record.state, record.run_at, record.attempt) == (JobState.PARKED, None, 0)
    moved = yield queries.promote_where({"state": "parked"})
    assert moved == BulkMoved(moved=1, remaining=0)
    record = yield queries.get_job(job.id)
    assert record.state is JobState.READY and record.run_at is not None


@pytest.mark.parametrize("source", SOURCES)
def test_every_call_answers_its_typed_model(conn: psycopg.Connection[Any], db_dsn: str,
                                            source: str) -> None:
    drive(source, db_dsn, lifecycle())


@pytest.mark.parametrize("source", SOURCES)
def test_a_parked_job_without_wake_up_reads_as_run_at_none(conn: psycopg.Connection[Any],
                                                           db_dsn: str, source: str) -> None:
    drive(source, db_dsn, parked_without_wake_up())


# -- coded errors --------------------------------------------------------------------------


def check_error(error: DatabaseError, cls: type[DatabaseError], sqlstate: str, name: str,
                detail: str | None = None, hint: str | None = None) -> None:
    assert type(error) is cls
    assert (error.sqlstate, error.name, cls.sqlstate) == (sqlstate, name, sqlstate)
    assert error.message.startswith(f"sqljobs.{name}: ")
    assert (error.detail, error.hint) == (detail, hint)
    assert isinstance(error.__cause__, psycopg.Error)
    assert error.__cause__.diag.sqlstate == sqlstate


def coded_errors() -> Scenario:
    with pytest.raises(InvalidArgument) as invalid:
        yield queries.enqueue("", "k", {}, {})
    check_error(invalid.value, InvalidArgument, "SJ001", "invalid_argument")
    assert invalid.value.message == "sqljobs.invalid_argument: spec 1: name is required"
    assert isinstance(invalid.value, ValueError)
    with pytest.raises(InvalidArgument):
        yield queries.claim(["default"], "w", 0, 30.0)
    with pytest.raises(InvalidArgument):
        yield queries.nack(1, 1, None, "explode")  # type: ignore[arg-type]

    with pytest.raises(PayloadTooLarge) as large:
        yield queries.enqueue("big", "k", {"blob": "x" * 1_100_000}, {})
    check_error(large.value, PayloadTooLarge, "SJ002", "payload_too_large",
                hint="store large data elsewhere and pass a reference in the payload")

    first = yield queries.enqueue("once", "k", {}, {"on_conflict": "error"})
    with pytest.raises(DuplicateJob) as duplicate:
        yield queries.enqueue("once", "k", {}, {"on_conflict": "error"})
    check_error(duplicate.value, DuplicateJob, "SJ003", "duplicate_job")
    assert f"job {first.id} already exists" in duplicate.value.message

    [held] = yield queries.claim(["default"], "w", 1, 30.0)
    with pytest.raises(LeaseLost) as lost:
        yield queries.ack(held.id, held.claim + 1)
    check_error(lost.value, LeaseLost, "SJ004", "lease_lost",
                detail="the job runs under another claim",  # never the live token
                hint="another worker may have taken it over after the lease lapsed; "
                     "this run must stop")
    with pytest.raises(LeaseLost):
        yield queries.nack(held.id, held.claim + 1, {"message": "late"})

    with pytest.raises(QueuesRequired) as no_queue:
        yield queries.claim([], "w", 1, 30.0)
    check_error(no_queue.value, QueuesRequired, "SJ005", "queues_required",
                hint="pass the queues this worker serves")

    with pytest.raises(JobNotFound) as missing:
        yield queries.cancel(-1)
    check_error(missing.value, JobNotFound, "SJ006", "job_not_found")
    assert isinstance(missing.value, LookupError)
    with pytest.raises(JobNotFound):
        yield queries.requeue([held.id, -1])

    with pytest.raises(JobRunning) as running:
        yield queries.promote(held.id)
    check_error(running.value, JobRunning, "SJ009", "job_running",
                hint="cancel it first, or wait for it to finish")
    with pytest.raises(JobRunning):
        yield queries.remove(held.id)

    yield queries.ack(held.id, held.claim, "done")
    with pytest.raises(JobNotRequeueable) as succeeded:
        yield queries.requeue([held.id])
    check_error(succeeded.value, JobNotRequeueable, "SJ007", "job_not_requeueable",
                hint="enqueue a new job with a new key to run it again")

    waiting = yield queries.enqueue("waiting", "k", {}, {"delay_s": 3600})
    with pytest.raises(JobLive) as live:
        yield queries.requeue([waiting.id])
    check_error(live.value, JobLive, "SJ008", "job_live")

    with pytest.raises(JobFinished) as finished:
        yield queries.cancel(held.id)
    check_error(finished.value, JobFinished, "SJ010", "job_finished")
    with pytest.raises(JobFinished):
        yield queries.promote(held.id)

    # Nothing the refusals touched changed.
    record = yield queries.get_job(held.id)
    assert (record.state, record.result, record.claim) == (JobState.SUCCEEDED, "done", 1)
    assert (yield queries.get_job(waiting.id)).state is JobState.READY


@pytest.mark.parametrize("source", SOURCES)
def test_coded_errors_raise_their_exception_class(conn: psycopg.Connection[Any], db_dsn: str,
                                                  source: str) -> None:
    drive(source, db_dsn, coded_errors())
    refused = conn.execute("select count(*) from jobs.job where name in ('', 'big')")
    assert refused.fetchone() == (0,)


def test_an_uncoded_server_error_stays_a_psycopg_error(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero):
        Client(conn).run(Call("select 1 / 0 as x", (), lambda rows: rows))


def test_every_sqlstate_in_the_database_has_one_exception_class(
    conn: psycopg.Connection[Any],
) -> None:
    codes = conn.execute("select sqlstate, name from jobs.error_codes()").fetchall()
    registry = DatabaseError.registry()
    assert {code for code, _ in codes} <= set(registry)
    assert all(registry[code].name == name for code, name in codes)


# -- run_all is all-or-nothing ---------------------------------------------------------------


def _batch(bad: bool) -> list[Call[Enqueued]]:
    return [
        queries.enqueue("all", "a", {}, {}),
        queries.enqueue("all", "b", {}, {"priority": 99_999} if bad else {}),
        queries.enqueue("all", "c", {}, {}),
    ]


def _count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select count(*) from jobs.job where name = 'all'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("source", ["connection", "pool"])
def test_run_all_is_all_or_nothing(conn: psycopg.Connection[Any], db_dsn: str,
                                   source: str) -> None:
    with ConnectionPool(db_dsn, min_size=1, max_size=1, open=False,
                        kwargs={"autocommit": True}) as pool:
        client = Client(conn) if source == "connection" else Client(pool)
        with pytest.raises(InvalidArgument):
            client.run_all(_batch(bad=True))
        assert _count(conn) == 0
        answers = client.run_all(_batch(bad=False))
    assert [a.outcome for a in answers] == ["created"] * 3
    assert _count(conn) == 3
    # The caller's connection is back in autocommit, out of any transaction.
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.parametrize("source", ["async-connection", "async-pool"])
def test_async_run_all_is_all_or_nothing(conn: psycopg.Connection[Any], db_dsn: str,
                                         source: str) -> None:
    async def scenario() -> list[Enqueued]:
        async with (
            await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn,
            AsyncConnectionPool(db_dsn, min_size=1, max_size=1, open=False,
                                kwargs={"autocommit": True}) as pool,
        ):
            client = AsyncClient(aconn) if source == "async-connection" else AsyncClient(pool)
            with pytest.raises(InvalidArgument):
                await client.run_all(_batch(bad=True))
            assert _count(conn) == 0
            return await client.run_all(_batch(bad=False))

    answers = asyncio.run(scenario())
    assert [a.outcome for a in answers] == ["created"] * 3
    assert _count(conn) == 3


# -- refusals before any I/O -----------------------------------------------------------------


def test_job_spec_refuses_unknown_and_missing_fields(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pydantic.ValidationError, match="priorty"):
        JobSpec(name="a", key="k", priorty=1)  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError, match="key"):
        JobSpec(name="a")  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        JobSpec.model_validate({"name": "a", "key": "k", "retry_jitter": "some"})
    spec = JobSpec(name="a", key="k", delay_s=5)
    assert spec.to_sql() == {"name": "a", "key": "k", "delay_s": 5.0}
    with pytest.raises(pydantic.ValidationError):
        spec.key = "other"  # type: ignore[misc]
    assert conn.execute("select count(*) from jobs.job").fetchone() == (0,)


def test_the_job_spec_model_has_the_engines_fields(conn: psycopg.Connection[Any]) -> None:
    """JobSpec (the model) and jobs.spec_fields() (read off jobs.job) name the same
    fields: a column added to the table without its model field fails here."""
    fields = Client(conn).run(queries.Call("select jobs.spec_fields() as f", (),
                                           lambda rows: rows[0]["f"]))
    assert set(JobSpec.model_fields) == set(fields)


def test_one_job_takes_the_single_job_path() -> None:
    call = queries.enqueue_spec(JobSpec(name="a", key="k", payload={"x": 1}, queue="mail"))
    assert call.sql.startswith("select id, outcome from jobs.enqueue(")
    assert call.params[:2] == ("a", "k")
    assert call.params[2].obj == {"x": 1} and call.params[3].obj == {"queue": "mail"}


def test_enqueue_many_takes_at_most_one_chunk(conn: psycopg.Connection[Any]) -> None:
    specs = [JobSpec(name="chunk", key=str(i)) for i in range(ENQUEUE_CHUNK + 1)]
    assert ENQUEUE_CHUNK == 1000
    with pytest.raises(ValueError, match="at most 1000"):
        queries.enqueue_many(specs)
    answers = Client(conn).run(queries.enqueue_many(specs[:ENQUEUE_CHUNK]))
    assert len(answers) == ENQUEUE_CHUNK and {a.outcome for a in answers} == {"created"}


def test_enqueue_many_answers_in_input_order_and_keeps_the_first_spec_of_a_key(
    conn: psycopg.Connection[Any],
) -> None:
    keys = [f"k{(i * 7) % 50}" for i in range(300)]  # every key six times, shuffled
    specs = [JobSpec(name="order", key=k, queue=f"q{i}") for i, k in enumerate(keys)]
    answers = Client(conn).run(queries.enqueue_many(specs))
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    ids = dict(conn.execute("select key, id from jobs.job where name = 'order'").fetchall())
    assert [a.id for a in answers] == [ids[k] for k in keys]
    assert [a.outcome for a in answers] == [
        "created" if first[k] == i else "deduped" for i, k in enumerate(keys)]
    queues = dict(conn.execute("select key, queue from jobs.job where name = 'order'").fetchall())
    assert queues == {k: f"q{i}" for k, i in first.items()}


# -- NOTIFY ----------------------------------------------------------------------------------

FENCE = "sqljobs_test_fence"


@pytest.fixture
def listener(db_dsn: str) -> Generator[psycopg.Connection[Any], None, None]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("listen jobs_wake")
        conn.execute("listen " + FENCE)
        yield conn


def wakes_before_fence(listener: psycopg.Connection[Any], producer: psycopg.Connection[Any],
                       marker: str) -> list[str]:
    """The jobs_wake payloads delivered before a fence notification sent afterwards.

    PostgreSQL delivers notifications in commit order, so everything the producer's
    earlier transactions sent arrives before the fence: no waiting and hoping.
    """
    producer.execute("select pg_catalog.pg_notify(%s, %s)", (FENCE, marker))
    # a payload is a queue's token, never its name (jobs.wake_tokens): read back the names
    names = {token: queue for queue, token in Client(producer).run(
        queries.wake_tokens(["red", "blue", "green", "quiet", "default"])).items()}
    wakes: list[str] = []
    for note in listener.notifies(timeout=SAFETY_S):
        if note.channel == FENCE and note.payload == marker:
            return wakes
        assert note.channel == "jobs_wake"
        assert note.payload in names, f"{note.payload!r} is not a token of a queue"
        wakes.append(names[note.payload])
    raise AssertionError("the fence notification never arrived")


def test_enqueue_many_wakes_each_queue_once(conn: psycopg.Connection[Any],
                                            listener: psycopg.Connection[Any]) -> None:
    specs = [JobSpec(name="wake", key=str(i), queue=("red", "blue")[i % 2]) for i in range(100)]
    Client(conn).run(queries.enqueue_many(specs))
    assert sorted(wakes_before_fence(listener, conn, "batch")) == ["blue", "red"]

    Client(conn).run(queries.enqueue("wake", "single", {}, {"queue": "green"}))
    assert wakes_before_fence(listener, conn, "single") == ["green"]

    # A repeat of the same keys creates nothing runnable: no wake.
    Client(conn).run(queries.enqueue_many(specs))
    assert wakes_before_fence(listener, conn, "repeat") == []


def test_a_job_delayed_into_the_future_wakes_nobody(conn: psycopg.Connection[Any],
                                                    listener: psycopg.Connection[Any]) -> None:
    Client(conn).run(queries.enqueue("later", "k", {}, {"queue": "red", "delay_s": 3600}))
    assert wakes_before_fence(listener, conn, "delayed") == []
    mixed = [JobSpec(name="later", key="a", queue="red", delay_s=3600),
             JobSpec(name="later", key="b", queue="blue")]
    Client(conn).run(queries.enqueue_many(mixed))
    assert wakes_before_fence(listener, conn, "mixed") == ["blue"]


def test_jobs_notify_off_silences_the_session(conn: psycopg.Connection[Any],
                                              listener: psycopg.Connection[Any]) -> None:
    conn.execute("set jobs.notify = off")
    specs = [JobSpec(name="quiet", key=str(i), queue=("red", "blue")[i % 2]) for i in range(100)]
    Client(conn).run(queries.enqueue_many(specs))
    Client(conn).run(queries.enqueue("quiet", "one", {}, {}))
    assert wakes_before_fence(listener, conn, "quiet") == []
