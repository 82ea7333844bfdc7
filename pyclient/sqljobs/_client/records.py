"""Typed records mirroring the results of the jobs.* SQL functions."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict


class JobState(StrEnum):
    """A job's states; docs/reference/states.md draws the machine."""

    READY = "ready"
    RUNNING = "running"
    PARKED = "parked"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


JobState.__module__ = "sqljobs"  # what records and reprs name it by: sqljobs.JobState

_FINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})

NackMode = Literal["retry", "fail", "park", "shed", "interrupt"]
Jitter = Literal["none", "full", "equal"]
Outcome = Literal["created", "deduped", "debounced"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


# The records of the hot paths (enqueue answers, claimed jobs, settle answers) are named
# tuples made straight from the rows: the engine typed them already, and validating
# each row again cost more than the rest of the client's work on it.

class Enqueued(NamedTuple):
    """One enqueue's answer: the job's id and whether it was new (`created`), an
    existing job of its key or singleton group (`deduped`), or a debounced job of its
    group that now carries this payload (`debounced`)."""

    id: int
    outcome: Outcome

    @property
    def deduped(self) -> bool:
        return self.outcome == "deduped"


class ClaimedJob(NamedTuple):
    """A job this worker now holds under `claim` until `lease_expires_at`."""

    id: int
    name: str
    queue: str
    tenant: str | None
    key: str
    payload: Any
    priority: int
    attempt: int
    max_attempts: int
    retry_base_s: float
    retry_cap_s: float
    retry_jitter: Jitter
    claim: int
    lease_expires_at: datetime
    timeout_s: float | None
    progress: Any
    traceparent: str | None
    created_at: datetime
    started_at: datetime | None = None  # this claim's time, on the database clock
    steps: dict[str, Any] | None = None  # stored durable steps {name: value} (sqljobs.steps)
    actor: Any = None  # who asked for the job (a JSON string or object; None: nobody said)
    run_at: datetime | None = None  # its place in line when claimed (the claim cursor's)
    # Set when a jsonb column of the row (payload, progress, steps, actor) could not be
    # decoded (nested deeper than Python's recursion limit, an integer too long to convert):
    # which column and why. Those four fields are then None and the job must not run;
    # the worker fails it at once (kind "undecodable"). Nothing else of the batch is lost.
    undecodable: str | None = None


class StepSleep(_Record):
    """`jobs.step_sleep`'s answer: the stored wake-up time; parked = the job now sleeps."""

    wake_at: datetime
    parked: bool


class StepInvoked(_Record):
    """`jobs.step_invoke`'s answer for one step: the stored child outcome (None while the
    child is live), the child's id, and parked = the job now awaits its children."""

    name: str
    value: Any
    child_id: int | None
    parked: bool


class StepWait(_Record):
    """`jobs.step_wait`'s answer: the stored outcome, or parked = the job now waits."""

    value: Any
    parked: bool


class Settled(NamedTuple):
    """A batched settle's answer for one job: ok = True written; False: the fence failed,
    no change; None: the row was busy (another transaction holds it locked), no change,
    call again."""

    id: int
    ok: bool | None
    state: JobState | None = None

    @property
    def busy(self) -> bool:
        return self.ok is None


class BulkMoved(_Record):
    """A bulk operator verb's answer: rows moved now, rows a second call would move."""

    moved: int
    remaining: int


class QueueStats(_Record):
    """One queue's row of `jobs.queue_stats()`: jobs by state, and what holds the waiting back."""

    queue: str
    paused: bool
    ready: int
    running: int
    parked: int
    interrupted: int
    succeeded: int
    failed: int
    dead: int
    cancelled: int
    oldest_ready_s: float
    unserved: int  # waiting jobs whose name no live worker declares
    limited: int  # waiting jobs a limit holds back (a full group, or a rate's deferral)


class StepRecord(_Record):
    """One stored step of a job (`jobs.job_steps(id)`)."""

    name: str
    ordinal: int
    kind: str
    value: Any
    created_at: datetime


class JobRecord(_Record):
    """One row of `jobs.job_view` (no payload)."""

    id: int
    name: str
    queue: str
    tenant: str | None
    key: str
    state: JobState
    priority: int
    run_at: datetime | None  # None: parked with no wake-up time (run_at = 'infinity')
    attempt: int
    max_attempts: int
    retry_base_s: float
    retry_cap_s: float
    retry_jitter: Jitter
    dead_letter: bool
    timeout_s: float | None
    claim: int
    lease_expires_at: datetime | None
    worker: str | None
    progress: Any
    last_error: Any
    result: Any
    traceparent: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    actor: Any = None  # who asked for the job (the caller's word, not authentication)


class JobSpec(BaseModel):
    """One job to enqueue: what `jobs.enqueue_many` takes, field for field.

    `name` and `key` are required: the idempotency key is never invented for you (use
    `sqljobs.fresh_key()` when every call must make a new job).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    key: str
    payload: Any = None
    queue: str | None = None
    tenant: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay_s: float | None = None
    max_attempts: int | None = None
    retry_base_s: float | None = None
    retry_cap_s: float | None = None
    retry_jitter: Jitter | None = None
    dead_letter: bool | None = None
    timeout_s: float | None = None
    traceparent: str | None = None
    group_key: str | None = None
    singleton: bool | None = None
    debounce_s: float | None = None
    throttle_n: int | None = None
    throttle_per_s: float | None = None
    on_conflict: Literal["return", "error"] | None = None
    hooks: dict[str, dict[str, str]] | None = None  # settlement hooks (docs/howto-hooks.md)
    # who asked for the job: a non-empty string or JSON object of at most 512 bytes
    # (checked by the SQL: InvalidActor); the caller's word, not authentication
    actor: Any = None

    def to_sql(self) -> dict[str, Any]:
        """The jsonb object the SQL reads; absent fields take the SQL defaults."""
        return self.model_dump(mode="json", exclude_none=True)


class SettledJob(BaseModel):
    """The payload of a settlement hook's job (`@app.job(on_settled=..., on_exhausted=...)`):
    the job that settled, the final state it reached, its attempt, and its last error
    (None when it succeeded). docs/howto-hooks.md."""

    job_id: int
    name: str
    state: JobState
    attempt: int
    error: dict[str, Any] | None = None


class WorkerRecord(_Record):
    """One live worker from `jobs.workers()`."""

    id: str
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    queues: list[str]
    names: list[str]
    concurrency: int
    host: str | None
    pid: int | None
    running: int


class UnservedJobs(_Record):
    """Waiting jobs of one (queue, name) that no live worker can run (`jobs.unserved_jobs()`)."""

    queue: str
    name: str
    waiting: int
    oldest_s: float


class JobOutcome(_Record):
    """Where a job stands, for a caller awaiting its result."""

    id: int
    state: JobState
    result: Any
    last_error: Any


# -- outbox (sql/70_outbox.sql) ----------------------------------------------------------

class Staged(_Record):
    """One stage's answer: the staged row's id (its future job's id), or the id the key
    already has (a job, or an unpublished staged row) with outcome `deduped`."""

    id: int
    outcome: Literal["staged", "deduped"]

    @property
    def deduped(self) -> bool:
        return self.outcome == "deduped"


class RelayStep(_Record):
    """One `jobs.relay` call: rows published now (`deduped` of them found their key's job
    already there) and rows claimed now, which the next call publishes."""

    published: int
    deduped: int
    held: int


class Purged(_Record):
    """A retention sweep's answer: rows deleted now, rows a second call would delete."""

    purged: int
    remaining: int


class PurgeStep(_Record):
    """One `jobs.purge` call: what it deleted (jobs, the outbox rows that went with them,
    events) and what is still eligible (jobs, events). `dry_run` calls delete nothing."""

    jobs: int
    outbox: int
    events: int
    jobs_remaining: int
    events_remaining: int

    @property
    def deleted(self) -> int:
        return self.jobs + self.events

    @property
    def remaining(self) -> int:
        return self.jobs_remaining + self.events_remaining


class RetentionPolicy(_Record):
    """The retention ages in effect for one queue ('*': every queue without its own),
    in seconds; `inf` keeps forever (`jobs.retention_policy`)."""

    queue: str
    succeeded_s: float
    failed_s: float
    dead_s: float
    cancelled_s: float
    awaited_s: float
    events_s: float


class OutboxStats(_Record):
    """The outbox's backlog (`jobs.outbox_stats()`): rows to relay, held, lapsed, published."""

    pending: int
    held: int
    lapsed: int
    published: int
    oldest_pending_s: float


# -- schedules (sql/80_schedule.sql) -----------------------------------------------------

CatchUp = Literal["all", "latest", "none"]


class ScheduleRecord(_Record):
    """One row of `jobs.schedules()`; `next_fire_at` is computed by the client from the
    cron expression (None when paused, or when the expression no longer parses)."""

    name: str
    job_name: str
    cron: str
    timezone: str
    catch_up: CatchUp
    options: dict[str, Any]
    payload: Any
    paused: bool
    origin: Literal["declared", "api"]
    watermark: datetime
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime
    next_fire_at: datetime | None = None


class BackfillRecord(_Record):
    """One row of the backfill ledger, as `jobs.backfills()` reads it: what ran, where,
    how far (`rows_done` of `expected`, `batches`, the `cursor` the next batch starts
    from) and who started it. `status` is running, paused, completed, stalled or
    cancelled, or the state of its job (failed, dead, cancelled) when that ended a
    running or paused row without finishing it."""

    environment: str
    name: str
    scope: str
    tenant: str | None
    checksum: str
    status: str
    job_id: int | None
    job_state: str | None
    batches: int
    rows_done: int
    expected: int | None
    cursor: Any
    started_by: str
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class WebhookAttempt(_Record):
    """One recorded attempt of an outbound webhook job (`jobs.webhook_attempts`):
    `outcome` is delivered, retry (a status to retry: 408, 429, 5xx, other non-2xx),
    rejected (another 4xx: terminal), error (no answer: connect, timeout), disabled
    (the endpoint is: no request sent) or refused (another tenant: no request sent);
    `status` the HTTP status (None: no answer); `excerpt` the answer's first bytes,
    redacted."""

    attempt: int
    endpoint: str
    outcome: str
    status: int | None
    latency_ms: int
    excerpt: str | None
    at: datetime


class WebhookEndpointState(_Record):
    """A disabled outbound webhook endpoint (`jobs.webhook_endpoints`)."""

    name: str
    tenant: str | None
    reason: str
    disabled_by: str
    disabled_at: datetime


class LedgerBalance(_Record):
    """One account's balance in one currency (`jobs.ledger_balances`): the sum of its
    lines (debits > 0, credits < 0) and how many there are."""

    tenant: str | None
    account: str
    currency: str
    balance: Decimal
    lines: int


class LedgerLine(_Record):
    """One line of a stored posting (`jobs.ledger_posting`)."""

    posting_id: int
    line: int
    account: str
    currency: str
    amount: Decimal
    memo: str | None
    job_id: int | None
    posted_at: datetime


class BackfillStart(NamedTuple):
    """What `jobs.backfill_begin` answers a run: `verdict` run | done, and where the run
    starts (the ledger's cursor and counts)."""

    verdict: str
    cursor: Any
    batches: int
    rows_done: int


class Fired(_Record):
    """One occurrence `jobs.schedule_fire` enqueued: its job, created or deduped."""

    occurrence: datetime
    job_id: int
    outcome: Outcome


# -- flow control (sql/35_limits.sql) ---------------------------------------------------

LimitScope = Literal["global", "queue", "name", "tenant", "key"]
WhenBusy = Literal["wait", "fail"]


class LimitRecord(_Record):
    """One row of `jobs.limits()`: a concurrency and/or rate limit as defined."""

    name: str
    scope: LimitScope
    target: str | None
    key_path: list[str] | None
    concurrency: int | None
    rate_n: int | None
    rate_per_s: float | None
    when_busy: WhenBusy
    origin: Literal["declared", "api"]
    updated_at: datetime


class LimitUse(_Record):
    """One row of `jobs.limit_stats()`: a limit group (`<limit>|<key>`) in use: running
    against its concurrency, starts in the window against its rate, and the jobs it
    holds back (`waiting` for a slot, `deferred` by the rate)."""

    limit_name: str
    grp: str
    concurrency: int | None
    running: int
    waiting: int
    rate_n: int | None
    rate_per_s: float | None
    recent_starts: int
    deferred: int


class QueueGauges(_Record):
    """One row of `jobs.queue_gauges()` (sql/93_metrics.sql): a queue's live counts, read
    from the live rows' indexes; what a Prometheus scrape reports."""

    queue: str
    paused: bool
    ready: int  # due now (ready or interrupted), waiting for a worker or a limit's slot
    scheduled: int  # ready or interrupted with run_at in the future
    running: int
    parked: int
    dead: int
    blocked: int  # of ready: waiting for a concurrency limit's slot
    oldest_ready_s: float
    demand: int  # running + due jobs a worker could take (0 of those while paused)


class LimitGauges(_Record):
    """One row of `jobs.limit_gauges()`: `jobs.limit_stats()` summed per limit."""

    limit_name: str
    groups: int
    running: int
    concurrency: int | None  # slots per group (None: a rate limit only)
    waiting: int
    deferred: int
    recent_starts: int


class QueueThroughput(_Record):
    """One row of `jobs.stats(window_s)`: a queue's finished jobs and latencies over a
    recent window (the percentiles are None when no job of the window had one)."""

    queue: str
    succeeded: int
    failed: int
    dead: int
    cancelled: int
    per_s: float
    wait_p50_s: float | None
    wait_p95_s: float | None
    run_p50_s: float | None
    run_p95_s: float | None


class LeaseRecord(_Record):
    """One row of `jobs.leases()` (never a token: that is its holder's proof)."""

    name: str
    holder: str | None
    lease_expires_at: datetime | None
    acquired_at: datetime | None
    live: bool


class TenantBinding(_Record):
    """One row of `jobs.tenant_bindings()`: a role whose sessions act within one tenant."""

    role_name: str
    tenant: str
    updated_at: datetime


class LeaderRecord(_Record):
    """One row of `jobs.leaders()`: who holds a role's leadership, and until when."""

    role: str
    holder: str | None
    token: int | None  # always None: a token is its holder's proof
    lease_expires_at: datetime | None
    acquired_at: datetime | None
    live: bool


__all__ = [
    "BackfillRecord",
    "BackfillStart",
    "BulkMoved",
    "ClaimedJob",
    "Enqueued",
    "Fired",
    "JobOutcome",
    "JobRecord",
    "JobSpec",
    "JobState",
    "LeaderRecord",
    "LeaseRecord",
    "LedgerBalance",
    "LedgerLine",
    "LimitGauges",
    "LimitRecord",
    "LimitUse",
    "OutboxStats",
    "PurgeStep",
    "Purged",
    "QueueGauges",
    "QueueStats",
    "QueueThroughput",
    "RelayStep",
    "RetentionPolicy",
    "ScheduleRecord",
    "Settled",
    "Staged",
    "StepInvoked",
    "StepRecord",
    "StepSleep",
    "StepWait",
    "TenantBinding",
    "UnservedJobs",
    "WebhookAttempt",
    "WebhookEndpointState",
    "WorkerRecord",
]
