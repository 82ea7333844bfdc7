"""The job state machine (docs/reference/states.md), driven at random against the SQL.

A hypothesis `RuleBasedStateMachine` runs random sequences of enqueue, enqueue_many,
claim, ack, nack (every mode, with and without delay), heartbeat, progress, cancel,
requeue, promote, stale settles and clock moves on one connection, and keeps a Python
model written from the functions' contract comments. After every step each job in the
database must equal its model (state, attempt, claim token, run_at, lease, finished_at)
and the invariants must hold.

Time is `jobs.fake_now`, moved only by the machine; retry_jitter is 'none' so every
run_at is predictable to the microsecond.

A second machine (FlowMachine, below) drives the verbs that decide whether a job may run:
concurrency, rate and key limits (blocked, deferred, key_busy), singleton, debounce,
throttle, tenant-bound sessions, durable steps, and the crash rules (leases lapsing, a
worker killed mid-batch and its late acks). SQLJOBS_MACHINE_EXAMPLES sets how many
sequences each machine runs (100 and 50 by default; 1000 for a long profile).

The engine bugs the flow machine found (issue 33) are fixed in schema version 3 and
pinned at the end of this file as regression tests: a started debounced job returning
to ready beside a waiting one, a debounced job awaiting its retry taking new enqueues,
a requeue into a taken singleton group, and ack_many answering per job id.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
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
    TenantRefused,
    queries,
)
from sqljobs._client.records import ClaimedJob, JobSpec, NackMode
from tests.helpers_db import empty_jobs_tables, set_clock

T0 = datetime(2030, 1, 1, tzinfo=UTC)
NAMES = ("alpha", "beta")
KEYS = ("k1", "k2", "k3")
QUEUES = ("q1", "q2")
BASE_S, CAP_S = 1.0, 8.0
LIVE = frozenset({"ready", "running", "parked", "interrupted"})
FINAL = frozenset({"succeeded", "failed", "dead", "cancelled"})
MISSING_ID = 0  # job ids start at 1
# Sequences per machine run: SQLJOBS_MACHINE_EXAMPLES=1000 for a long profile.
MACHINE_EXAMPLES = int(os.environ.get("SQLJOBS_MACHINE_EXAMPLES", "100"))


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


def empty_every_table(conn: psycopg.Connection[Any]) -> None:
    """Start a run empty: every table of the schema but the install's secret, named by
    the catalog (no list here has to follow the engine's tables), by DELETE: a run leaves
    a handful of rows, and TRUNCATE's new files cost ~50 ms, as much as the run itself.
    Triggers and foreign keys are off meanwhile (replica: the superuser's session)."""
    conn.execute("set session_replication_role = replica")
    try:
        for (table,) in conn.execute(
                "select format('%I.%I', schemaname, tablename) from pg_catalog.pg_tables "
                "where schemaname = 'jobs' and tablename <> 'channel_key'").fetchall():
            conn.execute("delete from " + table)  # type: ignore[arg-type]
    finally:
        conn.execute("reset session_replication_role")


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
        empty_every_table(self.conn)
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
            "lease_expires_at, finished_at from jobs.job_view order by id"
        ).fetchall()
        assert [r[0] for r in rows] == sorted(self.jobs)
        # (the public read side: job_view shows which claim, the token's high half; the
        # tokens themselves are checked by the claim rule and every fenced verb)
        for job_id, state, attempt, claim, run_at, lease, finished_at in rows:
            job = self.jobs[job_id]
            assert (state, attempt, claim) == (job.state, job.attempt, job.claim), job
            assert (run_at, lease, finished_at) == (job.run_at, job.lease, job.finished_at), job
            # Invariants that hold whatever the model says:
            assert (lease is not None) == (state == "running")
            assert (finished_at is not None) == (state in FINAL)
            assert attempt >= 0
            assert state not in ("ready", "interrupted") or run_at is not None
            assert claim >= self.claims_seen.get(job_id, 0), "a job's claim count went back"
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
    max_examples=MACHINE_EXAMPLES, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# =========================================================================================
# The flow machine: limits, singleton, debounce, throttle, tenancy, steps and crashes.
# =========================================================================================
#
# A second machine over the same contract, for the verbs that decide WHETHER a job may
# run rather than how its row moves. Which candidates a limited claim admits, blocks or
# defers is the engine's choice (its candidate window, its lock order); the model does not
# copy that choice, it checks it against the contract (docs/howto-limits.md):
#
# - SAFETY, after every step, from the rows: no concurrency group has more running jobs
#   than its limit (a lapsed lease holds its slot until recovery), and no rate or
#   throttle group has more than n starts in any window of per_s seconds;
# - every job a claim returns was runnable (ready or interrupted, due, of the claim's
#   queues and of the bound tenant), and its row moves exactly as the first machine's;
# - a job the claim does not return either keeps its row, or is DEFERRED (run_at moved
#   ahead, no earlier than its full window lets it start), or FAILED with key_busy, and
#   then only on evidence: another job of its key ran under a live lease;
# - LIVENESS: after claims that return and change nothing (a worker polling dry), every
#   runnable job has a full concurrency group: nothing waits on a limit with room.
#
# Everything else is exact, as in the first machine: enqueue outcomes (idempotency keys
# per tenant, singleton's deduped, debounce's collapse and moved start), state, attempt,
# claim token, run_at, lease, finished_at and payload of every job after every step; the
# stored steps a claim hands back; fenced batch verbs (ack_many, heartbeat_many) that
# answer ok per job; and the crash rules: a worker killed mid-batch (part of its batch
# acked in one call, the rest never touched again by it), leases lapsing, recovery by
# the next claim of those queues (a tenant-bound claim recovers its tenant's only), and
# the killed worker's late acks refused once its jobs were recovered.

FLOW_NAMES = ("alpha", "beta", "gamma")
TENANTS: tuple[str | None, ...] = (None, "t1", "t2")
BOUND = (None, None, "t1", "t2")  # the session a claim or enqueue runs in
WORKERS = ("w1", "w2")
DEBOUNCE_S = 5.0
FLOW_LEASES = (5.0, 30.0)


@dataclass(frozen=True)
class Limits:
    """The limits of one run (fixed for the run: a lowered limit lets running jobs run
    over it, by contract). None: that limit is not defined."""

    alpha: int | None          # name limit on alpha: concurrency
    beta_key: int | None       # key limit on beta by payload field k: concurrency
    beta_fail: bool            # ... with when_busy = fail
    tenant: int | None         # tenant limit, each tenant its own group
    queue_q2: int | None       # queue limit on q2
    overall: int | None        # global limit
    gamma_rate: int | None     # rate limit on gamma: n starts per GAMMA_PER_S

    def definitions(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if self.alpha:
            out["alpha_n"] = {"scope": "name", "target": "alpha", "concurrency": self.alpha}
        if self.beta_key:
            out["beta_k"] = {"scope": "key", "target": "beta", "key": "k",
                             "concurrency": self.beta_key,
                             "when_busy": "fail" if self.beta_fail else "wait"}
        if self.tenant:
            out["per_tenant"] = {"scope": "tenant", "concurrency": self.tenant}
        if self.queue_q2:
            out["q2_cap"] = {"scope": "queue", "target": "q2", "concurrency": self.queue_q2}
        if self.overall:
            out["everything"] = {"scope": "global", "concurrency": self.overall}
        if self.gamma_rate:
            out["gamma_rate"] = {"scope": "name", "target": "gamma",
                                 "rate": {"n": self.gamma_rate, "per_s": GAMMA_PER_S}}
        return out


GAMMA_PER_S = 10.0
THROTTLE_N, THROTTLE_PER_S = 1, 10.0

limits_strategy = st.builds(
    Limits,
    alpha=st.sampled_from((None, 1, 2)),
    beta_key=st.sampled_from((None, 1, 1)),
    beta_fail=st.booleans(),
    tenant=st.sampled_from((None, 1, 2)),
    queue_q2=st.sampled_from((None, None, 2)),
    overall=st.sampled_from((None, None, 3)),
    gamma_rate=st.sampled_from((None, 1, 2)),
)


@dataclass
class FlowJob(Job):
    name: str = ""
    tenant: str | None = None
    key_value: str = ""  # payload field k: the beta key limit's group
    group: str | None = None
    mode: str = "plain"  # plain | singleton | debounce | throttle
    payload: Any = None
    worker: str = ""
    steps: dict[str, Any] = field(default_factory=dict)
    created: datetime = T0  # the clock at its enqueue


def _window_full(starts: list[datetime], n: int, per_s: float, at: datetime) -> bool:
    """n starts already in the window (at - per_s, at]: no start may be admitted at `at`."""
    return sum(1 for s in starts if s > at - timedelta(seconds=per_s)) >= n


def _steps(steps: dict[str, Any] | None) -> dict[str, Any] | None:
    """Stored steps as the model keeps them: the handler's own (names starting with
    sqljobs. are the runtime's records, e.g. of an unwind or of the steps' order), a
    sleep's wake-up time as a datetime."""
    steps = {k: v for k, v in (steps or {}).items() if not k.startswith("sqljobs.")}
    if "z" in steps:
        steps["z"] = {"until": datetime.fromisoformat(steps["z"]["until"])}
    return steps or None


flow_spec = st.fixed_dictionaries({
    "name": st.sampled_from(FLOW_NAMES),
    "tenant": st.sampled_from((None, *TENANTS)),  # half with none: groups collide more
    "key": st.sampled_from(KEYS),
    "k": st.sampled_from(("a", "a", "b")),
    "queue": st.sampled_from(QUEUES),
    "max_attempts": st.sampled_from((1, 2, 3)),
    "mode": st.sampled_from(("plain", "plain", "singleton", "debounce", "throttle")),
    "group": st.sampled_from((None, "g")),
})


class FlowMachine(RuleBasedStateMachine):
    conn: ClassVar[psycopg.Connection[Any]]  # bound by the machine_connection fixture

    def __init__(self) -> None:
        super().__init__()
        self.client = Client(self.conn)
        self.now = T0
        self.jobs: dict[int, FlowJob] = {}
        self.by_key: dict[tuple[str, str | None, str], int] = {}
        self.starts: dict[tuple[Any, ...], list[datetime]] = {}  # rate group -> starts
        self.claims_of: dict[str, list[tuple[int, int]]] = {w: [] for w in WORKERS}
        self.abandoned: list[list[tuple[int, int]]] = []  # per killed process: (job, claim)
        self.limits = Limits(None, None, False, None, None, None, None)
        self.fresh = 0
        empty_every_table(self.conn)
        self._bind(None)
        set_clock(self.conn, self.now)

    # -- helpers -------------------------------------------------------------------------

    def _bind(self, tenant: str | None) -> None:
        """The session's tenant binding (sqljobs.tenant): None is the fleet's session."""
        self.conn.execute("select pg_catalog.set_config('sqljobs.tenant', %s, false)",
                          (tenant or "",))

    def _call(self, call: Any, bound: str | None) -> Any:
        self._bind(bound)
        try:
            return self.client.run(call)
        finally:
            self._bind(None)

    def _groups(self, j: FlowJob) -> list[tuple[tuple[Any, ...], int]]:
        """The concurrency groups of a job under this run's limits, with their caps."""
        lim = self.limits
        out: list[tuple[tuple[Any, ...], int]] = []
        if lim.alpha and j.name == "alpha":
            out.append((("alpha",), lim.alpha))
        if lim.beta_key and j.name == "beta":
            out.append((("beta", j.key_value), lim.beta_key))
        if lim.tenant and j.tenant is not None:
            out.append((("tenant", j.tenant), lim.tenant))
        if lim.queue_q2 and j.queue == "q2":
            out.append((("q2",), lim.queue_q2))
        if lim.overall:
            out.append((("all",), lim.overall))
        return out

    def _rates(self, j: FlowJob) -> list[tuple[tuple[Any, ...], int, float]]:
        """The rate groups of a job (rate limits and its throttle): (group, n, per_s)."""
        out: list[tuple[tuple[Any, ...], int, float]] = []
        if self.limits.gamma_rate and j.name == "gamma":
            out.append((("gamma",), self.limits.gamma_rate, GAMMA_PER_S))
        if j.mode == "throttle":
            out.append((("throttle", j.name, j.tenant, j.group), THROTTLE_N, THROTTLE_PER_S))
        return out

    def _running_in(self, group: tuple[Any, ...]) -> list[FlowJob]:
        return [j for j in self.jobs.values() if j.state == "running"
                and any(g == group for g, _ in self._groups(j))]

    def _live_held(self, worker: str) -> list[tuple[int, int]]:
        return [(i, c) for i, c in self.claims_of[worker]
                if self.jobs[i].state == "running" and self.jobs[i].token == c]

    def _runnable(self, j: FlowJob, queues: tuple[str, ...], bound: str | None) -> bool:
        return (j.state in ("ready", "interrupted") and j.run_at is not None
                and j.run_at <= self.now and j.queue in queues
                and (bound is None or j.tenant == bound))

    def _rows(self) -> dict[int, Any]:
        """Every job as the public read side shows it (jobs.job_view; the payload, which
        the view redacts for a job type no worker declared, by jobs.job_payload)."""
        return {r[0]: r for r in self.conn.execute(
            "select id, state::text, attempt, claim, nullif(run_at, 'infinity'), "
            "lease_expires_at, finished_at, jobs.job_payload(id), last_error->>'kind' "
            "from jobs.job_view order by id").fetchall()}

    # -- set-up --------------------------------------------------------------------------

    @initialize(limits=limits_strategy, specs=st.lists(flow_spec, min_size=1, max_size=5))
    def define_limits(self, limits: Limits, specs: list[dict[str, Any]]) -> None:
        self.limits = limits
        for name, definition in limits.definitions().items():
            self.client.run(queries.limit_put(name, definition))
        event(f"limits: {', '.join(sorted(limits.definitions())) or 'none'}")
        for spec in specs:
            self.enqueue(spec, None)

    @rule(which=st.sampled_from(("alpha", "beta_key", "tenant")),
          how=st.sampled_from(("raise", "remove")))
    def change_limit(self, which: str, how: str) -> None:
        """A limit raised or removed at run time: from the next claim on, and the jobs
        waiting on it are not left waiting (the liveness check). (Lowered, a limit lets
        running jobs run over it: not modelled.)"""
        current = getattr(self.limits, which)
        if current is None:
            return
        name = {"alpha": "alpha_n", "beta_key": "beta_k", "tenant": "per_tenant"}[which]
        if how == "remove":
            self.client.run(queries.limit_remove(name))
            self.limits = replace(self.limits, **{which: None})
        else:
            self.limits = replace(self.limits, **{which: current + 1})
            self.client.run(queries.limit_put(name, self.limits.definitions()[name]))
        event(f"limit {how}d")

    # -- enqueue -------------------------------------------------------------------------

    @rule(spec=flow_spec, bound=st.sampled_from(BOUND))
    def enqueue(self, spec: dict[str, Any], bound: str | None) -> None:
        """Enqueue, maybe from a tenant-bound session: it stamps its tenant on a spec
        that names none, and refuses one naming another tenant."""
        name, mode, group = spec["name"], spec["mode"], spec["group"]
        tenant = spec["tenant"]
        if bound is not None and tenant is not None and tenant != bound:
            with pytest.raises(TenantRefused):
                self._call(queries.enqueue(name, "x", {}, {"tenant": tenant}), bound)
            event("tenant refused: enqueue")
            return
        tenant = tenant or bound
        key = spec["key"]
        if mode != "plain":  # a group collapses distinct keys: give each its own
            self.fresh += 1
            key = f"f{self.fresh}"
        payload = {"k": spec["k"], "n": self.fresh}
        options: dict[str, Any] = {"queue": spec["queue"], "max_attempts": spec["max_attempts"],
                                   "retry_base_s": BASE_S, "retry_cap_s": CAP_S,
                                   "retry_jitter": "none", "dead_letter": False}
        if spec["tenant"] is not None:
            options["tenant"] = spec["tenant"]
        if group is not None:
            options["group_key"] = group
        if mode == "singleton":
            options["singleton"] = True
        elif mode == "debounce":
            options["debounce_s"] = DEBOUNCE_S
        elif mode == "throttle":
            options |= {"throttle_n": THROTTLE_N, "throttle_per_s": THROTTLE_PER_S}
        same_group = [j for j in self.jobs.values() if (j.name, j.tenant, j.group, j.mode)
                      == (name, tenant, group, mode)]
        answer = self._call(queries.enqueue(name, key, payload, options), bound)

        existing = self.by_key.get((name, tenant, key))
        if mode == "debounce":
            # waiting to start: ready and never claimed (a started job awaiting its retry
            # is ready too, and is left alone: the enqueue makes a new job)
            waiting = [j for j in same_group if j.state == "ready" and j.attempt == 0]
            if waiting:  # trailing: the waiting job takes the payload, starts later
                assert (answer.id, answer.outcome) == (waiting[0].id, "debounced")
                waiting[0].payload = payload
                waiting[0].key_value = payload["k"]  # its key limit's group moves with it
                waiting[0].run_at = self.now + timedelta(seconds=DEBOUNCE_S)
                return
        if existing is not None:
            assert (answer.id, answer.outcome) == (existing, "deduped")
            return
        if mode == "singleton":
            live = [j for j in same_group if j.state in LIVE]
            if live:
                assert (answer.id, answer.outcome) == (live[0].id, "deduped")
                return
        assert answer.outcome == "created", (answer, spec)
        delay = DEBOUNCE_S if mode == "debounce" else 0
        self.jobs[answer.id] = FlowJob(
            id=answer.id, queue=spec["queue"], priority=0, max_attempts=spec["max_attempts"],
            dead_letter=False, run_at=self.now + timedelta(seconds=delay), name=name,
            tenant=tenant, key_value=spec["k"], group=group, mode=mode, payload=payload,
            created=self.now)
        self.by_key[(name, tenant, key)] = answer.id
        event(f"enqueue: {mode}")

    # -- claim ---------------------------------------------------------------------------

    @rule(queues=st.sampled_from((("q1",), ("q2",), QUEUES, QUEUES)), limit=limits,
          lease_s=st.sampled_from(FLOW_LEASES), bound=st.sampled_from(BOUND),
          worker=st.sampled_from(WORKERS))
    def claim(self, queues: tuple[str, ...], limit: int, lease_s: float, bound: str | None,
              worker: str) -> None:
        self._claim(queues, limit, lease_s, bound, worker)

    def _claim(self, queues: tuple[str, ...], limit: int, lease_s: float, bound: str | None,
               worker: str) -> list[ClaimedJob]:
        now = self.now
        mine = [j for j in self.jobs.values()
                if j.queue in queues and (bound is None or j.tenant == bound)]
        # RECOVER lapsed leases (the claim's queues, the bound tenant's jobs only)
        for j in mine:
            if j.state == "running" and j.lease is not None and j.lease < now:
                event("flow claim: recovers a lapsed lease")
                j.settle("ready" if j.attempt < j.max_attempts else "failed", now)
        for j in mine:
            if j.state == "parked" and j.run_at is not None and j.run_at <= now:
                j.state = "ready"
        runnable = {j.id for j in mine if self._runnable(j, queues, bound)}
        held_live = {g for j in self.jobs.values() if j.state == "running"
                     and j.lease is not None and j.lease > now for g, _ in self._groups(j)}

        got: list[ClaimedJob] = self._call(
            queries.claim(list(queues), worker, limit, lease_s), bound)

        assert len(got) <= limit
        for c in got:
            assert c.id in runnable, f"claim returned job {c.id}, which was not runnable"
            j = self.jobs[c.id]
            assert (c.attempt, c.claim >> 32, c.lease_expires_at) == (
                j.attempt + 1, j.claim + 1, now + timedelta(seconds=lease_s)), j
            assert _steps(c.steps) == (j.steps or None), "the claim hands back the steps"
            if c.steps:
                event("flow claim: hands back stored steps")
            assert c.claim not in j.claims_issued
            j.state, j.attempt, j.claim, j.token = "running", j.attempt + 1, j.claim + 1, c.claim
            j.lease, j.worker = c.lease_expires_at, worker
            j.claims_issued.append(c.claim)
            self.claims_of[worker].append((j.id, c.claim))
            assert c.started_at is not None
            for g, _, _ in self._rates(j):
                self.starts.setdefault(g, []).append(c.started_at)
        if got:
            event(f"flow claim: {len(got)} of {limit}")
        # What the claim did to the jobs it did not return: nothing, defer, or fail.
        rows = self._rows()
        returned = {c.id for c in got}
        for job_id in runnable - returned:
            j, row = self.jobs[job_id], rows[job_id]
            state, run_at, kind = row[1], row[4], row[8]
            if state == "failed" and kind == "key_busy":
                # only on evidence: another run of its key held a live lease
                assert self.limits.beta_fail and ("beta", j.key_value) in held_live, j
                event("flow claim: key_busy")
                j.settle("failed", now)
            elif state == j.state and run_at != j.run_at:
                # deferred by a full rate window: to no earlier than it lets the job start
                assert run_at is not None and run_at > now, (j, run_at)
                full = [(g, n, per) for g, n, per in self._rates(j)
                        if _window_full(self.starts.get(g, []), n, per, now)]
                assert full, f"job {j.id} deferred with no full rate window"
                assert all(run_at >= sorted(self.starts[g])[-n] + timedelta(seconds=per)
                           for g, n, per in full), (j, run_at, self.starts)
                event("flow claim: deferred")
                j.run_at = run_at
        return got

    def _dry(self) -> None:
        """Claim (unbound, every queue) as a fleet polls with nothing it may start: until
        as many claims in a row as there are runnable jobs, and one more, return nothing.
        (An empty claim may still have refused some candidates, blocking or deferring
        them, which lets the next look at others; it cannot do so more times in a row
        than there are jobs to refuse. Counted so, the loop needs no knowledge of how
        many candidates a claim reads, nor of columns the contract does not name.)"""
        empty = 0
        for _ in range(200):
            if self._claim(QUEUES, 3, 30.0, None, "w1"):
                empty = 0
                continue
            empty += 1
            if empty > sum(self._runnable(j, QUEUES, None) for j in self.jobs.values()):
                return
        raise AssertionError("claims kept running jobs: the model's jobs are few")

    @rule()
    def claim_until_dry(self) -> None:
        """LIVENESS: once the fleet polls dry, every runnable job waits on a full group."""
        self._dry()
        for j in self.jobs.values():
            if self._runnable(j, QUEUES, None):
                full = [g for g, cap in self._groups(j) if len(self._running_in(g)) >= cap]
                assert full, f"job {j.id} is runnable, every group of it has room, " \
                             f"and the claims leave it: {j}"
                event("dry: a job waits on a full group")

    # -- settle, under held claims and stale ones -------------------------------------------

    def _pick_batch(self, data: st.DataObject, worker: str) -> list[tuple[int, int]]:
        """Some of the claims a worker was given, live or stale, one per job."""
        pool = sorted({i: (i, c) for i, c in self.claims_of[worker]}.values())
        return data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3,
                                  unique_by=lambda p: p[0])) if pool else []

    def _held(self, job_id: int, claim: int) -> bool:
        j = self.jobs[job_id]
        return j.state == "running" and j.token == claim

    @precondition(lambda self: any(self.claims_of.values()))
    @rule(data=st.data(), worker=st.sampled_from(WORKERS), bound=st.sampled_from(BOUND))
    def ack_many(self, data: st.DataObject, worker: str, bound: str | None) -> None:
        """A batch ack: ok per job where the claim still holds it, the rest untouched; a
        bound session naming another tenant's job is refused as a whole."""
        batch = self._pick_batch(data, worker)
        if not batch:
            return
        call = queries.ack_many([i for i, _ in batch], [c for _, c in batch])
        if bound is not None and any(self.jobs[i].tenant != bound for i, _ in batch):
            with pytest.raises(TenantRefused):
                self._call(call, bound)
            event("tenant refused: ack_many")
            return
        answers = self._call(call, bound)
        expected = [(i, self._held(i, c)) for i, c in batch]
        assert [(a.id, a.ok) for a in answers] == expected
        for i, ok in expected:
            if ok:
                self.jobs[i].settle("succeeded", self.now)

    @precondition(lambda self: any(self.claims_of.values()))
    @rule(data=st.data(), worker=st.sampled_from(WORKERS), lease_s=st.sampled_from(FLOW_LEASES))
    def heartbeat_many(self, data: st.DataObject, worker: str, lease_s: float) -> None:
        batch = self._pick_batch(data, worker)
        if not batch:
            return
        answers = self.client.run(queries.heartbeat_many(
            [i for i, _ in batch], [c for _, c in batch], lease_s))
        expected = [(i, self._held(i, c)) for i, c in batch]
        assert [(a.id, a.ok) for a in answers] == expected
        for i, ok in expected:
            if ok:
                self.jobs[i].lease = self.now + timedelta(seconds=lease_s)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), mode=st.sampled_from(("retry", "fail")))
    def nack(self, data: st.DataObject, mode: NackMode) -> None:
        job = data.draw(st.sampled_from([j for j in self.jobs.values() if j.state == "running"]))
        state = self.client.run(queries.nack(job.id, job.token, {"e": 1}, mode))
        if mode == "retry" and job.attempt < job.max_attempts:
            job.settle("ready", self.now)
            job.run_at = self.now + timedelta(seconds=backoff_s(job.attempt))
        else:
            job.settle("failed", self.now)
        assert state == job.state

    @rule(data=st.data(), bound=st.sampled_from(BOUND))
    def cancel(self, data: st.DataObject, bound: str | None) -> None:
        """Cancel (a running job's slot frees); a bound session may cancel only its own."""
        live = [j for j in self.jobs.values() if j.state in LIVE]
        if not live:
            return
        job = data.draw(st.sampled_from(live))
        if bound is not None and job.tenant != bound:
            before = self._row_of(job.id)
            with pytest.raises(TenantRefused):
                self._call(queries.cancel(job.id), bound)
            assert self._row_of(job.id) == before
            event("tenant refused: cancel")
            return
        self._call(queries.cancel(job.id), bound)
        job.settle("cancelled", self.now)

    @precondition(lambda self: any(
        j.state == "parked" or (j.state == "ready" and j.run_at and j.run_at > j.created)
        for j in self.jobs.values()))
    @rule(data=st.data())
    def promote(self, data: st.DataObject) -> None:
        """An operator runs a waiting job now: a parked one, or one deferred by a rate,
        debounced or backing off. A limit still holds it back at the claim."""
        job = data.draw(st.sampled_from([
            j for j in self.jobs.values() if j.state == "parked"
            or (j.state == "ready" and j.run_at and j.run_at > j.created)]))
        self.client.run(queries.promote(job.id))
        job.state = "ready"
        job.run_at = self.now if job.run_at is None else min(job.run_at, self.now)
        event("promote")

    @precondition(lambda self: any(j.state in ("failed", "cancelled")
                                   for j in self.jobs.values()))
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        """Failed (by its attempts, or key_busy) or cancelled: ready again, attempt 0."""
        job = data.draw(st.sampled_from([j for j in self.jobs.values()
                                         if j.state in ("failed", "cancelled")]))
        taken = any(
            j.id != job.id
            and (j.name, j.tenant, j.group, j.mode) == (job.name, job.tenant, job.group, job.mode)
            and ((job.mode == "singleton" and j.state in LIVE)
                 or (job.mode == "debounce" and j.state == "ready" and j.attempt == 0))
            for j in self.jobs.values())
        if taken:  # its group already has a live (singleton) or waiting (debounced) job
            with pytest.raises(JobLive):
                self.client.run(queries.requeue([job.id]))
            event(f"requeue: refused beside a live {job.mode} job")
            return
        self.client.run(queries.requeue([job.id]))
        job.settle("ready", self.now)
        job.attempt, job.run_at = 0, self.now
        event("requeue")

    def _row_of(self, job_id: int) -> Any:
        return self.conn.execute("select to_jsonb(j) from jobs.job_view j where j.id = %s",
                                 (job_id,)).fetchone()

    # -- crash rules ------------------------------------------------------------------------

    @precondition(lambda self: any(self._live_held(w) for w in WORKERS))
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def kill_worker_mid_batch(self, data: st.DataObject, worker: str) -> None:
        """SIGKILL mid-batch: the worker acked part of what it holds in one call, then
        died. It never touches the rest again (until, paused rather than dead, it wakes:
        late_ack_of_a_killed_worker); their leases lapse and a claim recovers them."""
        held = self._live_held(worker)
        if not held:
            return
        cut = data.draw(st.integers(0, len(held) - 1))
        if cut:
            answers = self.client.run(queries.ack_many([i for i, _ in held[:cut]],
                                                       [c for _, c in held[:cut]]))
            assert all(a.ok for a in answers)
            for i, _ in held[:cut]:
                self.jobs[i].settle("succeeded", self.now)
        self.abandoned.append(held[cut:])
        self.claims_of[worker] = []  # a new process under the same name holds nothing
        event("kill: mid-batch")

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule()
    def leases_lapse(self) -> None:
        """Every lease runs out (the fleet died, or stalled past its leases); the next
        claims recover the jobs: ready again with the attempt counted, or failed on
        their last, their slots free only then."""
        last = max(j.lease for j in self.jobs.values() if j.state == "running" and j.lease)
        self._move(last + timedelta(microseconds=1))
        self._dry()

    @precondition(lambda self: self.abandoned)
    @rule()
    def late_ack_of_a_killed_worker(self) -> None:
        """A worker taken for dead acks what it held: ok only where no claim recovered
        the job meanwhile (the fence is the token, not the clock)."""
        batch = self.abandoned.pop(0)  # one process's batch: a job once, under one claim
        if not batch:
            return
        answers = self.client.run(queries.ack_many([i for i, _ in batch],
                                                   [c for _, c in batch]))
        expected = [(i, self._held(i, c)) for i, c in batch]
        assert [(a.id, a.ok) for a in answers] == expected
        for i, ok in expected:
            event(f"late ack: {'held still' if ok else 'refused'}")
            if ok:
                self.jobs[i].settle("succeeded", self.now)

    # -- steps -------------------------------------------------------------------------------

    @precondition(lambda self: any(j.claims_issued for j in self.jobs.values()))
    @rule(data=st.data(), name=st.sampled_from(("s1", "s2")), value=st.integers(0, 3),
          lease_s=st.sampled_from((None, 30.0)))
    def step_put(self, data: st.DataObject, name: str, value: int, lease_s: float | None) -> None:
        """A durable step: stored once under the held claim (first write wins, the lease
        extended when asked); under any other claim refused, nothing stored."""
        job = data.draw(st.sampled_from([j for j in self.jobs.values() if j.claims_issued]))
        claim = data.draw(st.sampled_from(job.claims_issued))
        call = queries.step_put(job.id, claim, name, value, lease_s)
        if not self._held(job.id, claim):
            with pytest.raises(LeaseLost):
                self.client.run(call)
            event("step: fenced off")
            return
        stored = self.client.run(call)
        job.steps.setdefault(name, value)
        assert stored == job.steps[name]
        if lease_s is not None:
            job.lease = self.now + timedelta(seconds=lease_s)

    @precondition(lambda self: any(j.state == "running" for j in self.jobs.values()))
    @rule(data=st.data(), delay=st.sampled_from((0, 5)))
    def step_sleep(self, data: st.DataObject, delay: int) -> None:
        """A durable sleep: its wake-up time stored once; while ahead, the job parks
        (not an attempt, its slots free) until a claim wakes it."""
        job = data.draw(st.sampled_from([j for j in self.jobs.values() if j.state == "running"]))
        answer = self.client.run(queries.step_sleep(job.id, job.token, "z", delay_s=delay))
        if "z" not in job.steps:
            job.steps["z"] = {"until": self.now + timedelta(seconds=delay)}
        until = job.steps["z"]["until"]
        assert answer.wake_at == until
        assert answer.parked == (until > self.now)
        event(f"step sleep: {'parked' if answer.parked else 'passed'}")
        if answer.parked:
            job.settle("parked", self.now)
            job.attempt -= 1
            job.run_at = until

    # -- the clock -------------------------------------------------------------------------

    def _move(self, when: datetime) -> None:
        self.now = when
        set_clock(self.conn, when)

    @rule(seconds=st.sampled_from((1, 3, 5, 6, 10, 31)))
    def advance(self, seconds: int) -> None:
        self._move(self.now + timedelta(seconds=seconds))

    def _edges(self) -> list[datetime]:
        edges = {t for j in self.jobs.values() if j.state == "running" and j.lease
                 and j.lease >= self.now for t in (j.lease, j.lease + timedelta(microseconds=1))}
        edges |= {j.run_at for j in self.jobs.values()
                  if j.state in ("ready", "interrupted", "parked")
                  and j.run_at is not None and j.run_at > self.now}
        return sorted(edges)

    @precondition(lambda self: self._edges())
    @rule(data=st.data())
    def advance_to_an_edge(self, data: st.DataObject) -> None:
        self._move(data.draw(st.sampled_from(self._edges())))

    # -- after every step --------------------------------------------------------------------

    @invariant()
    def database_matches_model(self) -> None:
        rows = self._rows()
        assert sorted(rows) == sorted(self.jobs)
        for job_id, row in rows.items():
            j = self.jobs[job_id]
            _, state, attempt, claim, run_at, lease, finished_at, payload, _ = row
            # the view shows which claim (the token's high half), never the token: the
            # fenced verbs check the tokens themselves
            assert (state, attempt, claim) == (j.state, j.attempt, j.claim), j
            assert (run_at, lease, finished_at) == (j.run_at, j.lease, j.finished_at), j
            assert payload == j.payload, j

    @invariant()
    def no_group_over_its_limit(self) -> None:
        """From the rows alone: running jobs per concurrency group within its limit."""
        rows = self.conn.execute(
            "select id from jobs.job_view where state = 'running'").fetchall()
        counts: dict[tuple[Any, ...], int] = {}
        for (job_id,) in rows:
            for g, cap in self._groups(self.jobs[job_id]):
                counts[g] = counts.get(g, 0) + 1
                assert counts[g] <= cap, f"group {g} runs {counts[g]} jobs, its limit {cap}"

    @invariant()
    def slots_held_by_running_jobs_only(self) -> None:
        """Every path out of running frees the job's slot rows (jobs.release_slots is
        called by each settling function, not a trigger), and a running job holds a row
        for each of its groups."""
        assert self.conn.execute("""
            select s.grp, s.job_id, j.state from jobs.slot s
              left join jobs.job j on j.id = s.job_id
             where j.state is distinct from 'running'""").fetchall() == []
        assert self.conn.execute("""
            select j.id, g from jobs.job j cross join unnest(j.slots) as g
             where j.state = 'running'
               and not exists (select from jobs.slot s where s.grp = g and s.job_id = j.id)
        """).fetchall() == []

    @invariant()
    def every_row_carries_its_bucket(self) -> None:
        """Each job, step and slot row has bucket = its job's id & 255, written by the
        insert that made it (the column a distributed install is distributed by)."""
        assert self.conn.execute("""
            select 'job', id from jobs.job where bucket is distinct from (id & 255)
            union all
            select 'step', job_id from jobs.step where bucket is distinct from (job_id & 255)
            union all
            select 'slot', job_id from jobs.slot where bucket is distinct from (job_id & 255)
        """).fetchall() == []

    @invariant()
    def no_rate_window_over_its_limit(self) -> None:
        """At most n starts of a rate or throttle group in any window of per_s."""
        rates = {g: (n, per) for j in self.jobs.values() for g, n, per in self._rates(j)}
        for g, starts in self.starts.items():
            n, per = rates[g]
            ordered = sorted(starts)
            for i in range(n, len(ordered)):
                assert ordered[i] - ordered[i - n] >= timedelta(seconds=per), (g, ordered)


@pytest.fixture(scope="module", autouse=True)
def flow_machine_connection(db_dsn: str) -> Iterator[None]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        FlowMachine.conn = conn
        yield
        empty_jobs_tables(conn)


TestFlowStateMachine = FlowMachine.TestCase
TestFlowStateMachine.settings = settings(
    max_examples=max(MACHINE_EXAMPLES // 2, 1), stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_started_debounced_job_is_not_collapsed_into(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        empty_every_table(conn)
        client = Client(conn)
        set_clock(conn, T0)
        first = client.run(queries.enqueue("d", "x1", {"v": 1}, {
            "queue": "q1", "debounce_s": 5, "max_attempts": 3}))
        set_clock(conn, T0 + timedelta(seconds=6))
        [job] = client.run(queries.claim(["q1"], "w", 1, 30.0))
        assert job.id == first.id
        client.run(queries.nack(job.id, job.claim, {"e": 1}, "retry", 60))  # started, retries
        second = client.run(queries.enqueue("d", "x2", {"v": 2}, {
            "queue": "q1", "debounce_s": 5}))
        row = conn.execute("select run_at, payload from jobs.job_view where id = %s",
                           (first.id,)).fetchone()
        assert jobs_payload(conn, first.id) == {"v": 1} and row is not None
        assert row[0] == T0 + timedelta(seconds=66), "the retry keeps its time"
        assert second.outcome == "created" and second.id != first.id


def jobs_payload(conn: psycopg.Connection[Any], job_id: int) -> Any:
    return Client(conn).run(queries.job_payload(job_id))


def _started_debounced_job_and_a_waiting_one(conn: psycopg.Connection[Any]) -> tuple[Any, int]:
    """A debounced job A that started (running under a 30 s lease, 2 attempts), and B,
    enqueued into A's group meanwhile, which waits to start: both are live."""
    empty_every_table(conn)
    client = Client(conn)
    set_clock(conn, T0)
    client.run(queries.enqueue("d", "a", {"v": 1}, {
        "queue": "q1", "debounce_s": 5, "max_attempts": 2}))
    set_clock(conn, T0 + timedelta(seconds=6))
    [a] = client.run(queries.claim(["q1"], "w", 1, 30.0))
    b = client.run(queries.enqueue("d", "b", {"v": 2}, {"queue": "q1", "debounce_s": 5}))
    assert b.outcome == "created" and b.id != a.id
    return a, b.id


def test_a_lapsed_debounced_job_is_recovered_beside_a_waiting_one(db_dsn: str) -> None:
    """The claim's lease recovery took A back beside B (it raised a unique violation, and
    every recovering claim of the queue failed, before schema version 3)."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        a, b = _started_debounced_job_and_a_waiting_one(conn)
        set_clock(conn, T0 + timedelta(seconds=37))  # A's lease lapsed; B is due
        got = Client(conn).run(queries.claim(["q1"], "w", 2, 30.0))
        assert [g.id for g in got] == [a.id, b]  # A back in line first (its old run_at)


def test_a_started_debounced_job_retries_beside_a_waiting_one(db_dsn: str) -> None:
    """The worker's nack (retry) settles A beside B (it raised before version 3)."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        a, _ = _started_debounced_job_and_a_waiting_one(conn)
        state = Client(conn).run(queries.nack(a.id, a.claim, {"e": 1}, "retry", 1))
        assert state == "ready"


def test_ack_many_answers_each_input_under_its_own_claim(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        empty_every_table(conn)
        client = Client(conn)
        set_clock(conn, T0)
        client.run(queries.enqueue("x", "a", {}, {"queue": "q1", "max_attempts": 3}))
        [first] = client.run(queries.claim(["q1"], "w", 1, 5.0))
        set_clock(conn, T0 + timedelta(seconds=6))  # the lease lapsed; claimed again
        [second] = client.run(queries.claim(["q1"], "w", 1, 5.0))
        assert first.id == second.id and first.claim != second.claim
        answers = client.run(queries.ack_many([first.id, second.id],
                                              [first.claim, second.claim]))
        assert [a.ok for a in answers] == [False, True]


def test_requeue_of_a_singleton_beside_a_live_one_is_answered(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        empty_every_table(conn)
        client = Client(conn)
        set_clock(conn, T0)
        spec = {"queue": "q1", "singleton": True, "group_key": "g"}
        first = client.run(queries.enqueue("s", "a", {}, spec))
        client.run(queries.cancel(first.id))
        second = client.run(queries.enqueue("s", "b", {}, spec))
        assert second.outcome == "created"
        with pytest.raises(JobLive):  # refused by an error of the contract
            client.run(queries.requeue([first.id]))
