"""The job state machine (docs/reference/states.md), driven at random against the SQL.

A hypothesis `RuleBasedStateMachine` runs random sequences of enqueue, enqueue_many,
claim, ack, nack (every mode, with and without delay), heartbeat, progress, cancel,
requeue, promote, stale settles and clock moves on one connection, and keeps a Python
model written from the functions' contract comments. After every step each job in the
database must equal its model (state, attempt, claim token, run_at, lease, finished_at)
and the invariants must hold.

Time is `jobs.fake_now`, moved only by the machine; retry_jitter is 'none' so every
run_at is predictable to the microsecond.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from sqljobs import (
    Client,
    DuplicateJob,
    JobFinished,
    JobLive,
    JobNotFound,
    JobNotRequeueable,
    JobRunning,
    LeaseLost,
    queries,
)
from sqljobs._client.records import JobSpec, NackMode
from tests.helpers_db import empty_jobs_tables, set_clock

T0 = datetime(2030, 1, 1, tzinfo=UTC)
NAMES = ("alpha", "beta")
KEYS = ("k1", "k2", "k3")
QUEUES = ("q1", "q2")
BASE_S, CAP_S = 1.0, 8.0
LIVE = frozenset({"ready", "running", "parked", "interrupted"})
FINAL = frozenset({"succeeded", "failed", "dead", "cancelled"})
MISSING_ID = 0  # job ids start at 1


@dataclass
class Job:
    """The model of one job: what the contract comments say its row must hold."""

    id: int
    queue: str
    priority: int
    max_attempts: int
    dead_letter: bool
    run_at: datetime | None  # None: parked with no wake-up time ('infinity')
    state: str = "ready"
    attempt: int = 0
    claim: int = 0  # how many claims the job has had: its token's high half
    token: int = 0  # the token of the latest claim (the database's; its low half random)
    lease: datetime | None = None
    finished_at: datetime | None = None
    claims_issued: list[int] = field(default_factory=list)

    def settle(self, state: str, now: datetime) -> None:
        self.state = state
        self.lease = None
        self.finished_at = now if state in FINAL else None


def backoff_s(attempt: int) -> float:
    """jobs.backoff_s with jitter 'none'."""
    return min(CAP_S, BASE_S * 2 ** (max(attempt, 1) - 1))


enqueue_options = st.fixed_dictionaries({
    "queue": st.sampled_from(QUEUES),
    "priority": st.sampled_from((-1, 0, 0, 1)),
    "max_attempts": st.sampled_from((1, 2, 3)),
    "dead_letter": st.booleans(),
    "delay_s": st.sampled_from((None, None, 0, 5, 60)),
})
spec_strategy = st.tuples(st.sampled_from(NAMES), st.sampled_from(KEYS), enqueue_options)
delays = st.sampled_from((None, None, 0, 3, 10))  # None: the backoff curve (or park forever)
leases = st.sampled_from((5.0, 30.0))
# park twice: parked jobs feed the wake-up, promote and cancel paths.
nack_modes: st.SearchStrategy[NackMode] = st.sampled_from(
    ("retry", "fail", "park", "park", "shed", "interrupt"))
stale_verbs = st.sampled_from(("ack", "nack", "heartbeat", "progress"))
limits = st.sampled_from((1, 1, 2, 3))
# Clock moves: small steps, and steps across the 5 s and 30 s leases.
seconds = st.sampled_from((0, 1, 3, 5, 6, 10, 29, 30, 31, 61, 3600))


class JobMachine(RuleBasedStateMachine):
    conn: ClassVar[psycopg.Connection[Any]]  # bound by the machine_connection fixture

    def __init__(self) -> None:
        super().__init__()
        self.client = Client(self.conn)
        self.now = T0
        self.jobs: dict[int, Job] = {}
        self.by_key: dict[tuple[str, str], int] = {}
        self.claims_seen: dict[int, int] = {}
        # Start every run empty. DELETE, not TRUNCATE: a run leaves a handful of rows,
        # and TRUNCATE's new files cost ~50 ms, as much as the run itself.
        self.conn.execute("delete from jobs.job")
        set_clock(self.conn, self.now)

    # -- helpers -------------------------------------------------------------------------

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        sent = {k: v for k, v in options.items() if v is not None}
        return sent | {"retry_base_s": BASE_S, "retry_cap_s": CAP_S, "retry_jitter": "none"}

    def _new_job(self, job_id: int, name: str, key: str, options: dict[str, Any]) -> None:
        delay = options["delay_s"] or 0
        self.jobs[job_id] = Job(
            id=job_id, queue=options["queue"], priority=options["priority"],
            max_attempts=options["max_attempts"], dead_letter=options["dead_letter"],
            run_at=self.now + timedelta(seconds=delay),
        )
        self.by_key[(name, key)] = job_id

    def _running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "running"]

    def _stale(self) -> list[tuple[Job, int]]:
        return [(j, c) for j in self.jobs.values() for c in j.claims_issued
                if not (j.state == "running" and j.token == c)]

    def _row(self, job_id: int) -> Any:
        return self.conn.execute(
            "select to_jsonb(v) from jobs.job_view v where v.id = %s", (job_id,)
        ).fetchone()

    # -- enqueue -------------------------------------------------------------------------

    @initialize(specs=st.lists(spec_strategy, min_size=1, max_size=4))
    def start_with_jobs(self, specs: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.enqueue_many(specs)

    @rule(spec=spec_strategy, on_conflict=st.sampled_from(("return", "error")))
    def enqueue(self, spec: tuple[str, str, dict[str, Any]], on_conflict: str) -> None:
        name, key, options = spec
        existing = self.by_key.get((name, key))
        call = queries.enqueue(name, key, {"n": 1},
                               self._options(options) | {"on_conflict": on_conflict})
        if existing is not None and on_conflict == "error":
            with pytest.raises(DuplicateJob):
                self.client.run(call)
            return
        answer = self.client.run(call)
        if existing is not None:
            assert (answer.id, answer.outcome) == (existing, "deduped")
        else:
            assert answer.outcome == "created"
            self._new_job(answer.id, name, key, options)

    @rule(specs=st.lists(spec_strategy, min_size=1, max_size=4))
    def enqueue_many(self, specs: list[tuple[str, str, dict[str, Any]]]) -> None:
        answers = self.client.run(queries.enqueue_many(
            [JobSpec(name=n, key=k, **self._options(o)) for n, k, o in specs]))
        assert len(answers) == len(specs)
        for (name, key, options), answer in zip(specs, answers, strict=True):
            existing = self.by_key.get((name, key))
            if existing is not None:
                assert (answer.id, answer.outcome) == (existing, "deduped")
            else:  # a key repeated in the batch is created by its first spec
                assert answer.outcome == "created"
                self._new_job(answer.id, name, key, options)

    # -- claim ---------------------------------------------------------------------------

    @rule(queues=st.sampled_from((("q1",), ("q2",), QUEUES, QUEUES)), limit=limits,
          lease_s=leases)
    def claim(self, queues: tuple[str, ...], limit: int, lease_s: float) -> None:
        now = self.now
        mine = [j for j in self.jobs.values() if j.queue in queues]
        for j in mine:
            if j.state == "running" and j.lease is not None and j.lease <= now:
                event("claim: lease edge" if j.lease == now else "claim: lapsed lease")
            if j.state == "parked" and j.run_at is not None and j.run_at <= now:
                event("claim: parked at wake-up" if j.run_at == now else "claim: parked late")
        # RECOVER: lapsed leases (strictly before now); the final attempt is buried.
        for j in mine:
            if j.state == "running" and j.lease is not None and j.lease < now:
                if j.attempt < j.max_attempts:
                    j.settle("ready", now)
                else:
                    j.settle("dead" if j.dead_letter else "failed", now)
                # run_at is kept: a recovered job keeps its place in line
        # Parked jobs whose wake-up time came are ready again.
        for j in mine:
            if j.state == "parked" and j.run_at is not None and j.run_at <= now:
                j.state = "ready"
        # PICK in (priority, run_at, id) order, CLAIM under a new token.
        runnable = sorted(
            (j for j in mine if j.state in ("ready", "interrupted")
             and j.run_at is not None and j.run_at <= now),
            key=lambda j: (j.priority, j.run_at, j.id),
        )[:limit]
        for j in runnable:
            j.state = "running"
            j.attempt += 1
            j.claim += 1
            j.lease = now + timedelta(seconds=lease_s)
        got = self.client.run(queries.claim(list(queues), "w", limit, lease_s))
        assert [(c.id, c.attempt, c.claim >> 32, c.lease_expires_at) for c in got] == [
            (j.id, j.attempt, j.claim, j.lease) for j in runnable
        ]
        for j, c in zip(runnable, got, strict=True):
            assert c.claim not in j.claims_issued
            j.token = c.claim
            j.claims_issued.append(c.claim)

    # -- settle under a held claim ---------------------------------------------------------

    @precondition(lambda self: self._running())
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self._running()))
        self.client.run(queries.ack(job.id, job.token, {"ok": job.claim}))
        job.settle("succeeded", self.now)

    @precondition(lambda self: self._running())
    @rule(data=st.data(), mode=nack_modes, delay=delays)
    def nack(self, data: st.DataObject, mode: NackMode, delay: int | None) -> None:
        job = data.draw(st.sampled_from(self._running()))
        event(f"nack: {mode}, {'no delay' if delay is None else 'delay'}")
        state = self.client.run(queries.nack(job.id, job.token, {"e": mode}, mode, delay))
        now = self.now
        if mode == "fail":
            job.settle("failed", now)
        elif mode == "park":
            job.settle("parked", now)
            job.run_at = None if delay is None else now + timedelta(seconds=delay)
            job.attempt -= 1
        elif mode == "shed":
            job.settle("ready", now)
            job.run_at = now + timedelta(seconds=delay or 0)
            job.attempt -= 1
        elif mode == "interrupt":  # keeps its place in line unless a delay is given
            job.settle("interrupted", now)
            assert job.run_at is not None
            job.run_at = (min(job.run_at, now) if delay is None
                          else now + timedelta(seconds=delay))
            job.attempt -= 1
        elif job.attempt < job.max_attempts:
            job.settle("ready", now)
            job.run_at = now + timedelta(
                seconds=delay if delay is not None else backoff_s(job.attempt))
        else:
            job.settle("dead" if job.dead_letter else "failed", now)
        assert state == job.state

    @precondition(lambda self: self._running())
    @rule(data=st.data(), lease_s=leases, verb=st.sampled_from(("heartbeat", "progress")))
    def heartbeat(self, data: st.DataObject, lease_s: float, verb: str) -> None:
        """A held claim's heartbeat extends the lease; its progress is recorded."""
        job = data.draw(st.sampled_from(self._running()))
        if verb == "progress":
            assert self.client.run(queries.progress(job.id, job.token, {"at": 1})) is True
            return
        assert self.client.run(queries.heartbeat(job.id, job.token, lease_s)) is True
        job.lease = self.now + timedelta(seconds=lease_s)

    # -- a stale claim changes nothing ------------------------------------------------------

    def _stale_call(self, job: Job, claim: int, verb: str) -> None:
        before = self._row(job.id)
        if verb == "ack":
            with pytest.raises(LeaseLost):
                self.client.run(queries.ack(job.id, claim, "stale"))
        elif verb == "nack":
            with pytest.raises(LeaseLost):
                self.client.run(queries.nack(job.id, claim, "stale", "fail"))
        elif verb == "heartbeat":
            assert self.client.run(queries.heartbeat(job.id, claim, 30.0)) is False
        else:
            assert self.client.run(queries.progress(job.id, claim, "stale")) is False
        assert self._row(job.id) == before

    @precondition(lambda self: self._stale())
    @rule(data=st.data(), verb=stale_verbs)
    def stale_claim(self, data: st.DataObject, verb: str) -> None:
        """Any claim a job is no longer running under: finished, recovered, cancelled."""
        self._stale_call(*data.draw(st.sampled_from(self._stale())), verb)

    def _superseded(self) -> list[tuple[Job, int]]:
        return [(j, c) for j in self._running() for c in j.claims_issued if c != j.token]

    @precondition(lambda self: self._superseded())
    @rule(data=st.data(), verb=stale_verbs)
    def stale_claim_of_a_reclaimed_job(self, data: st.DataObject, verb: str) -> None:
        """The race that matters: the job is running again, under a newer claim."""
        self._stale_call(*data.draw(st.sampled_from(self._superseded())), verb)

    # -- operator verbs ----------------------------------------------------------------------

    def _pick_id(self, data: st.DataObject, prefer: Callable[[Job], bool]) -> int:
        """Half the time a job the verb moves (when there is one), else any id at all,
        a missing one included."""
        moved = [j.id for j in self.jobs.values() if prefer(j)]
        if moved and data.draw(st.booleans()):
            return data.draw(st.sampled_from(moved))
        return data.draw(st.sampled_from([MISSING_ID, *self.jobs]))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = self._pick_id(data, lambda j: j.state in LIVE)
        job = self.jobs.get(job_id)
        if job is None:
            with pytest.raises(JobNotFound):
                self.client.run(queries.cancel(job_id))
        elif job.state in FINAL:
            with pytest.raises(JobFinished):
                self.client.run(queries.cancel(job_id))
        else:
            self.client.run(queries.cancel(job_id))
            job.settle("cancelled", self.now)

    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        ids = [self._pick_id(data, lambda j: j.state in ("failed", "dead", "cancelled"))
               for _ in range(data.draw(st.integers(1, 2)))]
        jobs = [self.jobs.get(i) for i in ids]
        call = queries.requeue(ids)
        if any(j is None for j in jobs):
            expected: type[Exception] | None = JobNotFound
        elif any(j.state == "succeeded" for j in jobs if j):
            expected = JobNotRequeueable
        elif any(j.state in LIVE for j in jobs if j):
            expected = JobLive
        else:
            expected = None
        if expected is not None:
            with pytest.raises(expected):
                self.client.run(call)
            return
        self.client.run(call)
        for j in jobs:
            assert j is not None
            j.settle("ready", self.now)
            j.attempt = 0
            j.run_at = self.now

    @rule(data=st.data())
    def promote(self, data: st.DataObject) -> None:
        job_id = self._pick_id(data, lambda j: j.state == "parked" or (
            j.state in ("ready", "interrupted") and j.run_at is not None and j.run_at > self.now))
        job = self.jobs.get(job_id)
        if job is None:
            with pytest.raises(JobNotFound):
                self.client.run(queries.promote(job_id))
        elif job.state == "running":
            with pytest.raises(JobRunning):
                self.client.run(queries.promote(job_id))
        elif job.state in FINAL:
            with pytest.raises(JobFinished):
                self.client.run(queries.promote(job_id))
        else:
            self.client.run(queries.promote(job_id))
            if job.state == "parked":
                job.state = "ready"
            # A job already due keeps its place in line; None is 'infinity' (no wake-up).
            job.run_at = self.now if job.run_at is None else min(job.run_at, self.now)

    # -- the clock -----------------------------------------------------------------------

    def _move_clock(self, when: datetime) -> None:
        self.now = when
        set_clock(self.conn, when)

    @rule(seconds=seconds, then_claim=st.booleans(), limit=limits, lease_s=leases)
    def advance(self, seconds: int, then_claim: bool, limit: int, lease_s: float) -> None:
        """Time passes; then, maybe, a worker polls every queue."""
        self._move_clock(self.now + timedelta(seconds=seconds))
        if then_claim:
            self.claim(QUEUES, limit, lease_s)

    def _edges(self) -> list[datetime]:
        """Instants ahead where something turns: a lease's expiry (still held at that
        instant, lapsed one microsecond later) and a waiting job's run_at."""
        edges = {t for j in self._running() if j.lease and j.lease >= self.now
                 for t in (j.lease, j.lease + timedelta(microseconds=1))}
        edges |= {j.run_at for j in self.jobs.values()
                  if j.state in ("ready", "interrupted", "parked")
                  and j.run_at is not None and j.run_at > self.now}
        return sorted(edges)

    @precondition(lambda self: self._edges())
    @rule(data=st.data(), then_claim=st.booleans(), limit=limits, lease_s=leases)
    def advance_to_an_edge(self, data: st.DataObject, then_claim: bool, limit: int,
                           lease_s: float) -> None:
        self._move_clock(data.draw(st.sampled_from(self._edges())))
        if then_claim:
            self.claim(QUEUES, limit, lease_s)

    # -- after every step --------------------------------------------------------------------

    @invariant()
    def database_matches_model(self) -> None:
        rows = self.conn.execute(
            "select id, state::text, attempt, claim, nullif(run_at, 'infinity'), "
            "lease_expires_at, finished_at from jobs.job order by id"
        ).fetchall()
        assert [r[0] for r in rows] == sorted(self.jobs)
        for job_id, state, attempt, claim, run_at, lease, finished_at in rows:
            job = self.jobs[job_id]
            assert (state, attempt, claim >> 32, claim) == (
                job.state, job.attempt, job.claim, job.token), job
            assert (run_at, lease, finished_at) == (job.run_at, job.lease, job.finished_at), job
            # Invariants that hold whatever the model says:
            assert (lease is not None) == (state == "running")
            assert (finished_at is not None) == (state in FINAL)
            assert attempt >= 0
            assert state not in ("ready", "interrupted") or run_at is not None
            assert claim >= self.claims_seen.get(job_id, 0), "a claim token went back"
            self.claims_seen[job_id] = claim


@pytest.fixture(scope="module", autouse=True)
def machine_connection(db_dsn: str) -> Iterator[None]:
    """The one connection every run of the machine drives (each run empties the tables)."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        JobMachine.conn = conn
        yield
        empty_jobs_tables(conn)


TestJobStateMachine = JobMachine.TestCase
TestJobStateMachine.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
