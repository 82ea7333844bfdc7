"""Every SQL statement the package sends, in one place.

Each builder returns a `Call`: the statement, its parameters and how to decode its
rows. The sync and async clients only run calls, so each operation is written once.
Statements are `LiteralString` so psycopg's typing keeps them free of interpolation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, LiteralString, TypeVar

from psycopg.types.json import Jsonb

from sqljobs._client.records import (
    BackfillRecord,
    BackfillStart,
    BulkMoved,
    ClaimedJob,
    Enqueued,
    Fired,
    JobOutcome,
    JobRecord,
    JobSpec,
    JobState,
    LeaderRecord,
    LeaseRecord,
    LedgerBalance,
    LedgerLine,
    LimitGauges,
    LimitRecord,
    LimitUse,
    NackMode,
    OutboxStats,
    Purged,
    PurgeStep,
    QueueGauges,
    QueueStats,
    QueueThroughput,
    RelayStep,
    RetentionPolicy,
    ScheduleRecord,
    Settled,
    Staged,
    StepInvoked,
    StepRecord,
    StepSleep,
    StepWait,
    TenantBinding,
    UnservedJobs,
    WebhookAttempt,
    WebhookEndpointState,
    WorkerRecord,
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)  # a Call[int] is a Call[int | None]
Row = dict[str, Any]

# Clients send enqueue_many in chunks of this many specs (one statement per chunk).
ENQUEUE_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class Call(Generic[T_co]):
    """One statement and the decoding of its rows (dicts, or tuples for the hot paths)."""

    sql: LiteralString
    params: Sequence[Any]
    decode: Callable[[list[Any]], T_co]
    tuples: bool = False  # rows as tuples, not dicts: what the hot paths decode


def _one(field: str) -> Callable[[list[Row]], Any]:
    return lambda rows: rows[0][field] if rows else None


def _none(rows: list[Row]) -> None:
    return None


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


# -- version ------------------------------------------------------------------------

def schema_version() -> Call[int | None]:
    """The installed schema version.

    With no sqljobs schema (or one without jobs.schema_version()) the statement fails to
    parse (InvalidSchemaName or UndefinedFunction), which App.open turns into SchemaError.
    No guard inside one statement can avoid that, since names are resolved before
    anything runs; run it outside a transaction you care about.
    """
    return Call(
        "select jobs.schema_version() as version",
        (),
        _one("version"),
    )


def citus_installed() -> Call[bool]:
    """Whether this database has the Citus extension (citus_coordinator reads its
    catalogs, which exist only then)."""
    return Call("select exists (select from pg_catalog.pg_extension where extname = 'citus')"
                " as installed", (), _one("installed"))


def citus_coordinator() -> Call[str | None]:
    """Where the Citus coordinator is ('host:port') when this database is a Citus worker
    node, where sqljobs has no schema (docs/howto-citus.md); None on the coordinator."""
    return Call(
        "select pg_catalog.string_agg(n.nodename || ':' || n.nodeport, ', ') as coordinator"
        "  from pg_catalog.pg_dist_node n"
        " where n.groupid = 0"
        "   and (select g.groupid from pg_catalog.pg_dist_local_group g) <> 0",
        (),
        _one("coordinator"),
    )


def wake_tokens(queues: Sequence[str]) -> Call[dict[str, str]]:
    """Per queue, the token `jobs_wake` carries when a job of it becomes runnable."""
    return Call("select queue, token from jobs.wake_tokens(%s)", (list(queues),),
                lambda rows: {row["queue"]: row["token"] for row in rows})


def worker_token(worker_id: str) -> Call[str]:
    """The token `jobs_wake` carries when a job this worker runs is cancelled."""
    return Call("select jobs.worker_token(%s) as token", (worker_id,), _one("token"))


def watch_token(job_id: int) -> Call[str]:
    """The token `jobs_settled` carries when job `job_id` settles."""
    return Call("select jobs.watch_token(%s) as token", (job_id,), _one("token"))


def schema_floor() -> Call[int]:
    """The oldest client schema version the installed schema serves (version 2 on)."""
    return Call("select jobs.schema_floor() as floor", (), _one("floor"))


# -- enqueue --------------------------------------------------------------------------


def spec_defaults() -> Call[dict[str, Any]]:
    """The defaults of a job spec's fields (`jobs.spec_defaults()`, read off jobs.job)."""
    return Call("select jobs.spec_defaults() as defaults", (), _one("defaults"))


_new_tuple = tuple.__new__


def _enqueued(rows: list[tuple[Any, ...]]) -> Enqueued:
    return Enqueued._make(rows[0])


def _enqueued_many(rows: list[tuple[Any, ...]]) -> list[Enqueued]:
    # Each (id, outcome) row is an Enqueued's tuple already: made as one without a
    # call of the class per row (a tenth of the client's time on a batch of 1,000).
    return [_new_tuple(Enqueued, row) for row in rows]


def enqueue(name: str, key: str, payload: Any, options: Mapping[str, Any]) -> Call[Enqueued]:
    return Call(
        "select id, outcome from jobs.enqueue(%s, %s, %s, %s)",
        (name, key, Jsonb(payload if payload is not None else {}), Jsonb(dict(options))),
        _enqueued, tuples=True,
    )


def enqueue_spec(spec: JobSpec) -> Call[Enqueued]:
    """One job through jobs.enqueue, the single-job path: name, key and payload as
    arguments, every other field of the spec as its options."""
    options = spec.to_sql()
    return enqueue(options.pop("name"), options.pop("key"), options.pop("payload", None), options)


def enqueue_many(specs: Sequence[JobSpec]) -> Call[list[Enqueued]]:
    """At most ENQUEUE_CHUNK specs; the clients chunk longer batches."""
    if len(specs) > ENQUEUE_CHUNK:
        raise ValueError(f"enqueue_many takes at most {ENQUEUE_CHUNK} specs per call")
    return Call(
        "select id, outcome from jobs.enqueue_many(%s)",
        (Jsonb([spec.to_sql() for spec in specs]),),
        _enqueued_many, tuples=True,
    )


def enqueue_batch(spec: Mapping[str, Any], keys: Sequence[str],
                  payloads: str | None = None) -> Call[list[Enqueued]]:
    """Jobs that share `spec` (a spec's wire form without key and payload), one per key
    (at most ENQUEUE_CHUNK); `payloads` is the JSON text of an array holding one payload
    per key, None for every payload {} (jobs.enqueue_batch)."""
    if len(keys) > ENQUEUE_CHUNK:
        raise ValueError(f"enqueue_batch takes at most {ENQUEUE_CHUNK} keys per call")
    return Call(  # the keys go in binary: no quoting of each
        "select id, outcome from jobs.enqueue_batch(%s, %b, %s::jsonb)",
        (Jsonb(dict(spec)), list(keys), payloads),
        _enqueued_many, tuples=True,
    )


def enqueue_chunks(specs: Sequence[JobSpec]) -> list[Call[list[Enqueued]]]:
    """One enqueue_many call per chunk of ENQUEUE_CHUNK specs; run them in one transaction."""
    return [enqueue_many(specs[i:i + ENQUEUE_CHUNK]) for i in range(0, len(specs), ENQUEUE_CHUNK)]


# -- claim and settle -----------------------------------------------------------------

# The jsonb columns come as text (payload::text, ...) and _claimed decodes them row by
# row: one row Python cannot decode (a payload nested deeper than its recursion limit)
# is then that row's problem alone, where psycopg decoding jsonb would fail the whole
# fetch and leave every job of the claim running until its lease lapsed. Text costs no
# more than jsonb here: the server prints both alike, and json.loads of a str skips the
# encoding sniffing psycopg's jsonb loader does on bytes.
_CLAIMED_COLUMNS: LiteralString = (
    "id, name, queue, tenant, key, payload::text, priority, attempt, max_attempts, "
    "retry_base_s, retry_cap_s, retry_jitter, claim, lease_expires_at, timeout_s, "
    "progress::text, traceparent, created_at, started_at, steps::text, actor::text, run_at"
)
# Where _CLAIMED_COLUMNS has them (and ClaimedJob's fields, in the same order).
_CLAIMED_JSON: tuple[tuple[str, int], ...] = (
    ("payload", 5), ("progress", 15), ("steps", 19), ("actor", 20))


def claim(
    queues: Sequence[str],
    worker: str,
    limit: int = 1,
    lease_s: float = 30.0,
    names: Sequence[str] | None = None,
    recover: bool = True,
    version: str | None = None,
    after: Mapping[str, tuple[int, datetime]] | None = None,
) -> Call[list[ClaimedJob]]:
    """recover=False skips lapsed-lease recovery and parked wake-ups (a worker's claims
    as slots free; its periodic claims recover). version: only jobs first claimed with
    this code version, or never claimed (it is recorded on a first claim). after: per
    queue, a claim cursor (priority, run_at): only jobs at or after it in line, and of
    better priorities (sql/30_claim.sql says what it misses)."""
    options: dict[str, Any] = {} if names is None else {"names": list(names)}
    if not recover:
        options["recover"] = False
    if version is not None:
        options["version"] = version
    if after:
        options["after"] = _cursor(after)
    return Call(
        # claim_v2: jobs.claim's columns and the actor (schema version 3)
        "select " + _CLAIMED_COLUMNS + " from jobs.claim_v2(%s, %s, %s, %s, %s)",
        (list(queues), worker, limit, lease_s, Jsonb(options)),
        _claimed, tuples=True,
    )


def claimable_behind(queues: Sequence[str], after: Mapping[str, tuple[int, datetime]],
                     names: Sequence[str] | None = None,
                     version: str | None = None) -> Call[list[str]]:
    """`jobs.claimable_behind`: the queues of these claim cursors with a job a claim
    from the cursor would miss (read them from the head again)."""
    return Call("select jobs.claimable_behind(%s, %s, %s, %s) as queues",
                (list(queues), Jsonb(_cursor(after)),
                 None if names is None else list(names), version),
                _one("queues"))


def _cursor(after: Mapping[str, tuple[int, datetime]]) -> dict[str, list[Any]]:
    """Claim cursors in their wire form: {queue: [priority, run_at]}."""
    return {queue: [priority, run_at.isoformat()] for queue, (priority, run_at) in after.items()}


def recover(queues: Sequence[str], limit: int = 100) -> Call[int]:
    """`jobs.recover`: lapsed leases, due parked jobs and free limit slots of these
    queues, without claiming (a worker with no free slot calls it on its poll)."""
    return Call("select jobs.recover(%s, %s) as moved", (list(queues), limit), _one("moved"))


def _claimed(rows: list[tuple[Any, ...]]) -> list[ClaimedJob]:
    """The claimed rows as ClaimedJob, their jsonb text decoded here, row by row: a row
    whose jsonb cannot be decoded comes back with `undecodable` set (_undecodable), the
    rest of the batch as usual."""
    make, loads = ClaimedJob._make, json.loads
    jobs: list[ClaimedJob] = []
    append = jobs.append
    for row in rows:
        try:
            progress, steps, actor = row[15], row[19], row[20]
            append(make((*row[:5], loads(row[5]), *row[6:15],
                         None if progress is None else loads(progress), *row[16:19],
                         None if steps is None else loads(steps),
                         None if actor is None else loads(actor), row[21], None)))
        except Exception as error:  # whatever it is, it is this row's
            append(_undecodable(row, error))
    return jobs


def _undecodable(row: tuple[Any, ...], error: Exception) -> ClaimedJob:
    """A claimed row with a jsonb column Python cannot decode: its jsonb fields None,
    `undecodable` saying which column and why. An error that no column explains (a bug,
    not the row) is raised again."""
    for column, index in _CLAIMED_JSON:
        text = row[index]
        if text is None:
            continue
        try:
            json.loads(text)
        except RecursionError:
            reason = f"{column} nested deeper than Python can decode (RecursionError)"
        except Exception as problem:  # ValueError (a huge integer), MemoryError, ...
            detail = str(problem)
            detail = detail if len(detail) <= 300 else detail[:300] + "..."
            reason = f"{column} could not be decoded ({type(problem).__name__}: {detail})"
        else:
            continue
        values = list(row)
        for _, cleared in _CLAIMED_JSON:
            values[cleared] = None
        return ClaimedJob._make((*values, reason))
    raise error


def _settled(rows: list[tuple[Any, ...]]) -> list[Settled]:
    return [Settled(row[0], row[1]) for row in rows]


def _settled_in(rows: list[tuple[Any, ...]]) -> list[Settled]:
    return [Settled(row[0], row[1], None if row[2] is None else JobState(row[2]))
            for row in rows]


def ack(job_id: int, claim: int, result: Any = None) -> Call[None]:
    return Call("select jobs.ack(%s, %s, %s)", (job_id, claim, _json(result)), _none)


# The batch verbs send their ids and claim tokens in binary (%b): psycopg writes a list
# of ints as text one element at a time in Python, about four times the cost (an ack of
# 256 jobs spent 0.4 ms of the worker's CPU on it, against 0.1). The array's type is the
# same either way (the smallest integer type that holds every element).
def ack_many(
    ids: Sequence[int], claims: Sequence[int], results: Sequence[Any] | None = None
) -> Call[list[Settled]]:
    return Call(
        "select id, ok from jobs.ack_many(%b, %b, %s::jsonb[])",
        (list(ids), list(claims), None if results is None else [_json(r) for r in results]),
        _settled, tuples=True,
    )


def nack(
    job_id: int,
    claim: int,
    error: Any = None,
    mode: NackMode = "retry",
    delay_s: float | None = None,
) -> Call[str]:
    return Call(
        "select jobs.nack(%s, %s, %s, %s, %s)::text as state",
        (job_id, claim, _json(error), mode, delay_s),
        _one("state"),
    )


def nack_many(
    ids: Sequence[int],
    claims: Sequence[int],
    errors: Sequence[Any] | None = None,
    modes: Sequence[NackMode] | None = None,
    delays_s: Sequence[float | None] | None = None,
) -> Call[list[Settled]]:
    return Call(
        "select id, ok, state::text as state "
        "from jobs.nack_many(%b, %b, %s::jsonb[], %s::text[], %s::float8[])",
        (
            list(ids),
            list(claims),
            None if errors is None else [_json(e) for e in errors],
            None if modes is None else list(modes),
            None if delays_s is None else list(delays_s),
        ),
        _settled_in, tuples=True,
    )


def settle_hold(ids: Sequence[int], claims: Sequence[int]) -> Call[list[int]]:
    """Hold the settle keys of jobs a batch settle answered busy for, until the
    transaction ends (run it in one kept open): answers the ids held."""
    return Call("select jobs.settle_hold(%b, %b) as held", (list(ids), list(claims)),
                lambda rows: list(rows[0]["held"] or []))


def heartbeat(job_id: int, claim: int, lease_s: float = 30.0) -> Call[bool | None]:
    """True: renewed; False: no longer this claim's; None: the row was busy, call again."""
    return Call("select jobs.heartbeat(%s, %s, %s) as ok", (job_id, claim, lease_s), _one("ok"))


def heartbeat_many(
    ids: Sequence[int], claims: Sequence[int], lease_s: float
) -> Call[list[Settled]]:
    return Call(
        "select id, ok from jobs.heartbeat_many(%b, %b, %s)",
        (list(ids), list(claims), lease_s),
        _settled, tuples=True,
    )


def progress(job_id: int, claim: int, value: Any) -> Call[bool]:
    return Call(
        "select jobs.progress(%s, %s, %s) as ok", (job_id, claim, _json(value)), _one("ok")
    )


# -- operator verbs -------------------------------------------------------------------


def cancel(job_id: int) -> Call[None]:
    return Call("select jobs.cancel(%s)", (job_id,), _none)


def requeue(job_ids: Sequence[int]) -> Call[None]:
    return Call("select jobs.requeue(%s)", (list(job_ids),), _none)


def promote(job_id: int) -> Call[None]:
    return Call("select jobs.promote(%s)", (job_id,), _none)


def remove(job_id: int) -> Call[None]:
    return Call("select jobs.remove(%s)", (job_id,), _none)


def fence_run(job_id: int, claim: int) -> Call[None]:
    """`jobs.fence_run`: sent first in the transaction of a write made inside a run."""
    return Call("select jobs.fence_run(%s, %s)", (job_id, claim), _none)


def fork(job_id: int, from_step: str) -> Call[int]:
    """`jobs.fork`: a new job that replays `job_id`'s steps stored before `from_step`
    and runs that step and the rest; answers the new job's id."""
    return Call("select jobs.fork(%s, %s) as id", (job_id, from_step), _one("id"))


def _bulk(rows: list[Row]) -> BulkMoved:
    return BulkMoved.model_validate(rows[0])


def cancel_where(filter: Mapping[str, Any], max: int = 1000) -> Call[BulkMoved]:
    return Call("select moved, remaining from jobs.cancel_where(%s, %s)",
                (Jsonb(dict(filter)), max), _bulk)


def requeue_where(filter: Mapping[str, Any], max: int = 1000) -> Call[BulkMoved]:
    return Call("select moved, remaining from jobs.requeue_where(%s, %s)",
                (Jsonb(dict(filter)), max), _bulk)


def promote_where(filter: Mapping[str, Any], max: int = 1000) -> Call[BulkMoved]:
    return Call("select moved, remaining from jobs.promote_where(%s, %s)",
                (Jsonb(dict(filter)), max), _bulk)


def remove_where(filter: Mapping[str, Any], max: int = 1000) -> Call[BulkMoved]:
    return Call("select moved, remaining from jobs.remove_where(%s, %s)",
                (Jsonb(dict(filter)), max), _bulk)


def pause_queue(queue: str) -> Call[None]:
    return Call("select jobs.pause_queue(%s)", (queue,), _none)


def resume_queue(queue: str) -> Call[None]:
    return Call("select jobs.resume_queue(%s)", (queue,), _none)


# -- read side ------------------------------------------------------------------------


def queue_stats() -> Call[list[QueueStats]]:
    return Call(
        "select queue, paused, ready, running, parked, interrupted, succeeded, failed, dead, "
        "cancelled, oldest_ready_s, unserved, limited from jobs.queue_stats_v2()",
        (),
        lambda rows: [QueueStats.model_validate(row) for row in rows],
    )


_JOB_VIEW_COLUMNS: LiteralString = (
    # A job parked with no wake-up time has run_at = 'infinity', which no Python
    # datetime can hold: it reads as None.
    "id, name, queue, tenant, key, state::text as state, priority, "
    "nullif(run_at, 'infinity') as run_at, attempt, "
    "max_attempts, retry_base_s, retry_cap_s, retry_jitter, dead_letter, timeout_s, claim, "
    "lease_expires_at, worker, progress, last_error, result, traceparent, created_at, "
    "started_at, finished_at, actor"
)


def get_job(job_id: int) -> Call[JobRecord | None]:
    return Call(
        "select " + _JOB_VIEW_COLUMNS + " from jobs.job_view where id = %s",
        (job_id,),
        lambda rows: JobRecord.model_validate(rows[0]) if rows else None,
    )


def job_payload(job_id: int) -> Call[Any]:
    return Call("select jobs.job_payload(%s) as payload", (job_id,), _one("payload"))


def list_jobs(
    states: Sequence[str] | None = None,
    queue: str | None = None,
    name: str | None = None,
    tenant: str | None = None,
    limit: int = 50,
) -> Call[list[JobRecord]]:
    """Newest jobs first, filtered by state(s), queue, name and tenant (None: any)."""
    return Call(
        "select " + _JOB_VIEW_COLUMNS + " from jobs.job_view"
        " where (%s::text[] is null or state::text = any (%s::text[]))"
        " and (%s::text is null or queue = %s) and (%s::text is null or name = %s)"
        " and (%s::text is null or tenant = %s)"
        " order by id desc limit %s",
        (
            None if not states else list(states), None if not states else list(states),
            queue, queue, name, name, tenant, tenant, limit,
        ),
        lambda rows: [JobRecord.model_validate(row) for row in rows],
    )


def jobs_with_payloads(states: Sequence[str], names: Sequence[str] | None = None,
                       limit: int = 1000) -> Call[list[Row]]:
    """Jobs in `states` (of `names`, None: any), oldest first, each with its payload NOT
    redacted (jobs.job_payload): what the testing kit asserts on."""
    return Call(
        "select " + _JOB_VIEW_COLUMNS + ", jobs.job_payload(id) as payload from jobs.job_view"
        " where state::text = any (%s::text[]) and (%s::text[] is null or name = any (%s))"
        " order by id limit %s",
        (list(states), None if names is None else list(names),
         None if names is None else list(names), limit),
        lambda rows: list(rows),
    )


# The jobs of some names, in some queues (None: any): what a test's drain looks at.
_OF_NAMES_IN_QUEUES: LiteralString = (" from jobs.job_view where name = any (%s)"
                       " and (%s::text[] is null or queue = any (%s))")


def _names_in_queues(names: Sequence[str],
                     queues: Sequence[str] | None) -> tuple[list[str], list[str] | None,
                                                              list[str] | None]:
    some = None if queues is None else list(queues)
    return list(names), some, some


def due_jobs(names: Sequence[str], queues: Sequence[str] | None) -> Call[Row]:
    """How many jobs of `names` (in `queues`, None: any) a worker is running and how
    many it could claim now, and the ids of those waiting for a later run_at: what a
    test's drain waits on."""
    return Call(
        "select pg_catalog.count(*) filter (where state = 'running') as running,"
        " pg_catalog.count(*) filter (where state in ('ready', 'interrupted', 'parked')"
        "   and run_at <= (select jobs.now())) as due,"
        " coalesce(pg_catalog.array_agg(id order by id) filter (where state in ('ready',"
        "   'interrupted') and run_at > (select jobs.now())), '{}') as later"
        + _OF_NAMES_IN_QUEUES,
        _names_in_queues(names, queues),
        lambda rows: rows[0],
    )


def due_job_ids(names: Sequence[str], queues: Sequence[str] | None) -> Call[list[int]]:
    """The ids of the jobs of `names` (in `queues`, None: any) a worker could claim now
    (due_jobs' `due`), in the engine's claim order: a one-pass drain's jobs."""
    return Call(
        "select id" + _OF_NAMES_IN_QUEUES
        + " and state in ('ready', 'interrupted', 'parked') and run_at <= (select jobs.now())"
        " order by priority, run_at, id",
        _names_in_queues(names, queues),
        lambda rows: [row["id"] for row in rows],
    )


def jobs_left(ids: Sequence[int], queues: Sequence[str]) -> Call[int]:
    """How many of `ids` in `queues` are running or still due: what a one-pass drain
    waits on."""
    return Call(
        "select pg_catalog.count(*) as left from jobs.job_view where id = any (%s)"
        " and queue = any (%s) and (state = 'running'"
        "   or state in ('ready', 'interrupted', 'parked') and run_at <= (select jobs.now()))",
        (list(ids), list(queues)),
        _one("left"),
    )


def job_steps(job_id: int) -> Call[list[StepRecord]]:
    return Call(
        "select name, ordinal, kind, value, created_at from jobs.job_steps(%s)",
        (job_id,),
        lambda rows: [StepRecord.model_validate(row) for row in rows],
    )


# -- workers registry (sql/45_workers.sql) ----------------------------------------------


def worker_heartbeat(
    worker_id: str,
    queues: Sequence[str],
    names: Sequence[str],
    concurrency: int,
    ttl_s: float,
    host: str | None = None,
    pid: int | None = None,
    info: Mapping[str, Any] | None = None,
) -> Call[Any]:
    return Call(
        "select jobs.worker_heartbeat(%s, %s, %s, %s, %s, %s, %s, %s) as expires_at",
        (worker_id, list(queues), list(names), concurrency, ttl_s, host, pid,
         Jsonb(dict(info or {}))),
        _one("expires_at"),
    )


def worker_stop(worker_id: str) -> Call[bool]:
    return Call("select jobs.worker_stop(%s) as ok", (worker_id,), _one("ok"))


def workers() -> Call[list[WorkerRecord]]:
    return Call(
        "select id, started_at, heartbeat_at, expires_at, queues, names, concurrency, host, "
        "pid, running from jobs.workers()",
        (),
        lambda rows: [WorkerRecord.model_validate(row) for row in rows],
    )


def unserved_jobs() -> Call[list[UnservedJobs]]:
    return Call(
        "select queue, name, waiting, oldest_s from jobs.unserved_jobs()",
        (),
        lambda rows: [UnservedJobs.model_validate(row) for row in rows],
    )


# -- results ------------------------------------------------------------------------------

SETTLED_CHANNEL: LiteralString = "jobs_settled"


def watch_outcome(job_id: int) -> Call[JobOutcome | None]:
    """The job's state, result and last error; its settlement now notifies jobs_settled."""
    return Call(
        "select id, state::text as state, result, last_error from jobs.watch_outcome(%s)",
        (job_id,),
        lambda rows: JobOutcome.model_validate(rows[0]) if rows else None,
    )


# -- durable steps and events (sql/50_steps.sql, sql/60_events.sql) -----------------------


def step_put(job_id: int, claim: int, name: str, value: Any, lease_s: float | None = None,
             options: Mapping[str, bool] | None = None) -> Call[Any]:
    """Store a step (first write wins); answers the stored value (its JSON round trip)."""
    return Call(
        "select jobs.step_put(%s, %s, %s, %s, %s, %s) as value",
        (job_id, claim, name, Jsonb(value), lease_s, Jsonb(dict(options or {}))),
        _one("value"),
    )


def step_unwound(job_id: int, claim: int) -> Call[str]:
    return Call(
        "select jobs.step_unwound(%s, %s)::text as state", (job_id, claim), _one("state"))


def step_sleep(job_id: int, claim: int, name: str, until: Any = None,
               delay_s: float | None = None) -> Call[StepSleep]:
    return Call(
        "select wake_at, parked from jobs.step_sleep(%s, %s, %s, %s, %s)",
        (job_id, claim, name, until, delay_s),
        lambda rows: StepSleep.model_validate(rows[0]),
    )


def step_wait(job_id: int, claim: int, name: str, specs: Sequence[Mapping[str, Any]],
              timeout_s: float | None = None, lease_s: float | None = None) -> Call[StepWait]:
    return Call(
        "select value, parked from jobs.step_wait(%s, %s, %s, %s, %s, %s)",
        (job_id, claim, name, Jsonb([dict(s) for s in specs]), timeout_s, lease_s),
        lambda rows: StepWait.model_validate(rows[0]),
    )


def emit_event(name: str, payload: Mapping[str, Any] | None = None,
               actor: Any = None) -> Call[int]:
    """`jobs.emit_event_v2`: actor None names none (inside a run, jobs.fence_run, sent
    first, makes the run's actor the default)."""
    return Call(
        "select jobs.emit_event_v2(%s, %s, %s) as id",
        (name, Jsonb(dict(payload or {})), Jsonb({} if actor is None else {"actor": actor})),
        _one("id"),
    )


# -- outbox (sql/70_outbox.sql) --------------------------------------------------------


def stage_many(specs: Sequence[Mapping[str, Any]]) -> Call[list[Staged]]:
    """Stage at most ENQUEUE_CHUNK specs (JobSpec.to_sql() plus an optional ordering_key)."""
    if len(specs) > ENQUEUE_CHUNK:
        raise ValueError(f"stage_many takes at most {ENQUEUE_CHUNK} specs per call")
    return Call(
        "select ord, id, outcome from jobs.stage_many(%s)",
        (Jsonb(list(specs)),),
        lambda rows: [Staged.model_validate(row) for row in rows],
    )


def stage_chunks(specs: Sequence[Mapping[str, Any]]) -> list[Call[list[Staged]]]:
    """One stage_many call per chunk of ENQUEUE_CHUNK specs; run them in one transaction."""
    return [stage_many(specs[i:i + ENQUEUE_CHUNK]) for i in range(0, len(specs), ENQUEUE_CHUNK)]


def relay(batch: int, relay_id: str, lease_s: float = 30.0) -> Call[RelayStep]:
    return Call(
        "select published, deduped, held from jobs.relay(%s, %s, %s)",
        (batch, relay_id, lease_s),
        lambda rows: RelayStep.model_validate(rows[0]),
    )


def purge_outbox(retention_s: float, max: int = 1000) -> Call[Purged]:
    return Call(
        "select purged, remaining from jobs.purge_outbox(%s, %s)",
        (retention_s, max),
        lambda rows: Purged.model_validate(rows[0]),
    )


def outbox_stats() -> Call[OutboxStats]:
    return Call(
        "select pending, held, lapsed, published, oldest_pending_s from jobs.outbox_stats()",
        (),
        lambda rows: OutboxStats.model_validate(rows[0]),
    )


def step_invoke(job_id: int, claim: int, names: Sequence[str], specs: Sequence[JobSpec],
                lease_s: float | None = None) -> Call[list[StepInvoked]]:
    return Call(
        "select name, value, child_id, parked from jobs.step_invoke(%s, %s, %s, %s, %s)",
        (job_id, claim, list(names), Jsonb([spec.to_sql() for spec in specs]), lease_s),
        lambda rows: [StepInvoked.model_validate(row) for row in rows],
    )


# -- retention (sql/95_retention.sql) --------------------------------------------------


# one row of a purge batch from its (what, deleted, remaining) rows
_PURGE_STEP = (
    "select pg_catalog.max(deleted) filter (where what = 'job') as jobs,"
    " pg_catalog.max(deleted) filter (where what = 'outbox') as outbox,"
    " pg_catalog.max(deleted) filter (where what = 'event') as events,"
    " pg_catalog.max(remaining) filter (where what = 'job') as jobs_remaining,"
    " pg_catalog.max(remaining) filter (where what = 'event') as events_remaining"
    " from ")


def purge(max: int = 1000, dry_run: bool = False,
          policy: Mapping[str, Any] | None = None) -> Call[PurgeStep]:
    """One bounded `jobs.purge` batch; `policy` overrides the stored one for this call."""
    return Call(
        _PURGE_STEP + "jobs.purge(%s, %s, %s)",
        (max, dry_run, None if policy is None else Jsonb(dict(policy))),
        lambda rows: PurgeStep.model_validate(rows[0]),
    )


def retention_sweep(max: int = 1000) -> Call[PurgeStep]:
    """One bounded retention batch under the stored policy (`jobs.retention_sweep`):
    what the scheduler's leader runs, and its role may run."""
    return Call(
        _PURGE_STEP + "jobs.retention_sweep(%s)",
        (max,),
        lambda rows: PurgeStep.model_validate(rows[0]),
    )


def retention_put(queue: str | None, policy: Mapping[str, Any]) -> Call[None]:
    return Call("select 1 from jobs.retention_put(%s, %s)", (queue, Jsonb(dict(policy))),
                lambda rows: None)


def retention_remove(queue: str | None) -> Call[bool]:
    return Call("select jobs.retention_remove(%s) as removed", (queue,),
                lambda rows: bool(rows[0]["removed"]))


def retention_policy(policy: Mapping[str, Any] | None = None) -> Call[list[RetentionPolicy]]:
    return Call(
        "select queue, succeeded_s, failed_s, dead_s, cancelled_s, awaited_s, events_s"
        " from jobs.retention_policy(%s)",
        (None if policy is None else Jsonb(dict(policy)),),
        lambda rows: [RetentionPolicy.model_validate(row) for row in rows],
    )


# -- schedules and the leader lease (sql/80_schedule.sql) -----------------------------

_SCHEDULE_COLUMNS: LiteralString = (
    "name, job_name, cron, timezone, catch_up, options, payload, paused, origin, watermark, "
    "last_fired_at, created_at, updated_at"
)


# -- the backfill ledger (sql/85_factories.sql) ---------------------------------------

_BACKFILL_COLUMNS: LiteralString = (
    "environment, name, scope, tenant, checksum, status, job_id, job_state, batches, "
    "rows_done, expected, cursor, started_by, started_at, updated_at, finished_at")


def backfill_begin(job_id: int, claim: int, name: str, scope: str, environment: str,
                   environments: Sequence[str] | None, requires: Sequence[str],
                   checksum: str, expected: int | None, rerun: bool,
                   started_by: str) -> Call[BackfillStart]:
    return Call(
        "select verdict, cursor, batches, rows_done from jobs.backfill_begin("
        "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (job_id, claim, name, scope, environment,
         None if environments is None else list(environments), list(requires), checksum,
         expected, rerun, started_by),
        lambda rows: BackfillStart(*rows[0]), tuples=True)


def backfill_advance(job_id: int, claim: int, name: str, scope: str, environment: str,
                     batch: int, cursor: Any, rows: int) -> Call[str]:
    return Call(
        "select jobs.backfill_advance(%s, %s, %s, %s, %s, %s, %s, %s) as status",
        (job_id, claim, name, scope, environment, batch, _json(cursor), rows),
        _one("status"))


def backfill_status(job_id: int, claim: int, name: str, scope: str,
                    environment: str) -> Call[str]:
    return Call("select jobs.backfill_status(%s, %s, %s, %s, %s) as status",
                (job_id, claim, name, scope, environment), _one("status"))


def backfill_finish(job_id: int, claim: int, name: str, scope: str,
                    environment: str) -> Call[str]:
    return Call("select jobs.backfill_finish(%s, %s, %s, %s, %s) as status",
                (job_id, claim, name, scope, environment), _one("status"))


def backfill_pause(name: str, scope: str, environment: str) -> Call[None]:
    return Call("select jobs.backfill_pause(%s, %s, %s)", (name, scope, environment), _none)


def backfill_resume(name: str, scope: str, environment: str) -> Call[None]:
    return Call("select jobs.backfill_resume(%s, %s, %s)", (name, scope, environment), _none)


def backfill_cancel(name: str, scope: str, environment: str) -> Call[None]:
    return Call("select jobs.backfill_cancel(%s, %s, %s)", (name, scope, environment), _none)


def backfills(environment: str | None = None) -> Call[list[BackfillRecord]]:
    """The ledger (`jobs.backfills`): one environment's rows, or every environment's."""
    return Call(
        "select " + _BACKFILL_COLUMNS + " from jobs.backfills(%s)",
        (environment,),
        lambda rows: [BackfillRecord.model_validate(row) for row in rows])


# -- outbound webhooks (sql/87_integrations.sql) ----------------------------------------

def webhook_attempt_put(job_id: int, claim: int, endpoint: str, outcome: str,
                        status: int | None, latency_ms: int, excerpt: str | None) -> Call[int]:
    """Record the running webhook job's current attempt (fenced on its claim)."""
    return Call("select jobs.webhook_attempt_put(%s, %s, %s, %s, %s, %s, %s) as attempt",
                (job_id, claim, endpoint, outcome, status, latency_ms, excerpt),
                _one("attempt"))


def webhook_disabled(endpoint: str) -> Call[str | None]:
    """Why the endpoint is disabled, or None."""
    return Call("select jobs.webhook_disabled(%s) as reason", (endpoint,), _one("reason"))


def webhook_disable(endpoint: str, tenant: str | None, reason: str) -> Call[None]:
    return Call("select jobs.webhook_disable(%s, %s, %s)", (endpoint, tenant, reason), _none)


def webhook_enable(endpoint: str) -> Call[bool]:
    return Call("select jobs.webhook_enable(%s) as was", (endpoint,), _one("was"))


def webhook_attempts(job_id: int) -> Call[list[WebhookAttempt]]:
    return Call(
        "select attempt, endpoint, outcome, status, latency_ms, excerpt, at "
        "from jobs.webhook_attempts(%s)", (job_id,),
        lambda rows: [WebhookAttempt.model_validate(row) for row in rows])


def webhook_endpoints() -> Call[list[WebhookEndpointState]]:
    return Call(
        "select name, tenant, reason, disabled_by, disabled_at from jobs.webhook_endpoints()",
        (), lambda rows: [WebhookEndpointState.model_validate(row) for row in rows])


# -- the ledger (sql/87_integrations.sql) --------------------------------------------------

def ledger_post(job_id: int, claim: int, ledger: str, key: str, lines: Any,
                memo: str | None) -> Call[dict[str, Any]]:
    """Write one balanced posting under its key, for the running job (fenced)."""
    return Call("select posting_id, created from jobs.ledger_post(%s, %s, %s, %s, %s, %s)",
                (job_id, claim, ledger, key, Jsonb(lines), memo),
                lambda rows: dict(rows[0]))


def ledger_balances(ledger: str, account: str | None = None) -> Call[list[LedgerBalance]]:
    return Call(
        "select tenant, account, currency, balance, lines from jobs.ledger_balances(%s, %s)",
        (ledger, account), lambda rows: [LedgerBalance.model_validate(r) for r in rows])


def ledger_posting(ledger: str, key: str, tenant: str | None) -> Call[list[LedgerLine]]:
    return Call(
        "select posting_id, line, account, currency, amount, memo, job_id, posted_at "
        "from jobs.ledger_posting(%s, %s, %s)", (ledger, key, tenant),
        lambda rows: [LedgerLine.model_validate(r) for r in rows])


def database_now() -> Call[datetime]:
    """The database's clock, `jobs.now()` (a session's jobs.fake_now when set)."""
    return Call("select jobs.now() as now", (), _one("now"))


def schedule_put(name: str, definition: Mapping[str, Any]) -> Call[bool]:
    return Call(
        "select jobs.schedule_put(%s, %s) as created",
        (name, Jsonb(dict(definition))),
        _one("created"),
    )


def schedule_pause(name: str) -> Call[None]:
    return Call("select jobs.schedule_pause(%s)", (name,), _none)


def schedule_resume(name: str) -> Call[None]:
    return Call("select jobs.schedule_resume(%s)", (name,), _none)


def schedule_remove(name: str) -> Call[None]:
    return Call("select jobs.schedule_remove(%s)", (name,), _none)


def schedules() -> Call[list[ScheduleRecord]]:
    return Call(
        "select " + _SCHEDULE_COLUMNS + " from jobs.schedules()",
        (),
        lambda rows: [ScheduleRecord.model_validate(row) for row in rows],
    )


def schedule_fire(name: str, occurrences: Sequence[datetime], watermark: datetime,
                  token: int) -> Call[list[Fired]]:
    return Call(
        "select occurrence, job_id, outcome from jobs.schedule_fire(%s, %s, %s, %s)",
        (name, list(occurrences), watermark, token),
        lambda rows: [Fired.model_validate(row) for row in rows],
    )


def leader_acquire(role: str, holder: str, lease_s: float) -> Call[int | None]:
    return Call(
        "select jobs.leader_acquire(%s, %s, %s) as token",
        (role, holder, lease_s),
        _one("token"),
    )


def leader_release(role: str, holder: str, token: int) -> Call[bool]:
    return Call(
        "select jobs.leader_release(%s, %s, %s) as released",
        (role, holder, token),
        _one("released"),
    )


def leaders() -> Call[list[LeaderRecord]]:
    return Call(
        "select role, holder, token, lease_expires_at, acquired_at, live from jobs.leaders()",
        (),
        lambda rows: [LeaderRecord.model_validate(row) for row in rows],
    )


# -- flow control: limits and leases (sql/35_limits.sql) -------------------------------


def limit_put(name: str, definition: Mapping[str, Any]) -> Call[bool]:
    """Define or replace a limit; True when it is new (see jobs.limit_put)."""
    return Call("select jobs.limit_put(%s, %s) as created", (name, Jsonb(dict(definition))),
                _one("created"))


def limit_remove(name: str) -> Call[None]:
    return Call("select jobs.limit_remove(%s)", (name,), _none)


def limits() -> Call[list[LimitRecord]]:
    return Call(
        "select name, scope, target, key_path, concurrency, rate_n, rate_per_s, when_busy, "
        "origin, updated_at from jobs.limits()",
        (),
        lambda rows: [LimitRecord.model_validate(row) for row in rows],
    )


def limit_stats() -> Call[list[LimitUse]]:
    return Call(
        "select limit_name, grp, concurrency, running, waiting, rate_n, rate_per_s, "
        "recent_starts, deferred from jobs.limit_stats()",
        (),
        lambda rows: [LimitUse.model_validate(row) for row in rows],
    )


# -- tenancy (sql/15_tenancy.sql) ------------------------------------------------------

def tenant_bind(role: str, tenant: str) -> Call[bool]:
    """Bind a role (and its members' sessions) to one tenant; True when the binding is new."""
    return Call("select jobs.tenant_bind(%s, %s) as created", (role, tenant), _one("created"))


def tenant_unbind(role: str) -> Call[bool]:
    """Remove a role's binding; True when there was one."""
    return Call("select jobs.tenant_unbind(%s) as removed", (role,), _one("removed"))


def tenant_bindings() -> Call[list[TenantBinding]]:
    return Call("select role_name, tenant, updated_at from jobs.tenant_bindings()", (),
                lambda rows: [TenantBinding.model_validate(row) for row in rows])


# -- metrics (sql/93_metrics.sql) ------------------------------------------------------

def queue_gauges() -> Call[list[QueueGauges]]:
    return Call(
        "select queue, paused, ready, scheduled, running, parked, dead, blocked, "
        "oldest_ready_s, demand from jobs.queue_gauges()",
        (),
        lambda rows: [QueueGauges.model_validate(row) for row in rows],
    )


def limit_gauges() -> Call[list[LimitGauges]]:
    return Call(
        "select limit_name, groups, running, concurrency, waiting, deferred, recent_starts "
        "from jobs.limit_gauges()",
        (),
        lambda rows: [LimitGauges.model_validate(row) for row in rows],
    )


def stats(window_s: float) -> Call[list[QueueThroughput]]:
    return Call(
        "select queue, succeeded, failed, dead, cancelled, per_s, wait_p50_s, wait_p95_s, "
        "run_p50_s, run_p95_s from jobs.stats(%s)",
        (window_s,),
        lambda rows: [QueueThroughput.model_validate(row) for row in rows],
    )


def lease_acquire(name: str, holder: str, ttl_s: float) -> Call[int | None]:
    """The fencing token, or None while another holder's lease is live."""
    return Call("select jobs.lease_acquire(%s, %s, %s) as token", (name, holder, ttl_s),
                _one("token"))


def lease_renew(name: str, holder: str, token: int, ttl_s: float) -> Call[bool]:
    return Call("select jobs.lease_renew(%s, %s, %s, %s) as held",
                (name, holder, token, ttl_s), _one("held"))


def lease_release(name: str, holder: str, token: int) -> Call[bool]:
    return Call("select jobs.lease_release(%s, %s, %s) as released", (name, holder, token),
                _one("released"))


def lease_holds(name: str, token: int) -> Call[bool]:
    """True while `token` holds the live lease; run it in the transaction of the write
    it guards (it locks the lease row for share until that transaction ends)."""
    return Call("select jobs.lease_holds(%s, %s) as holds", (name, token), _one("holds"))


def leases() -> Call[list[LeaseRecord]]:
    return Call(
        "select name, holder, lease_expires_at, acquired_at, live from jobs.leases()",
        (),
        lambda rows: [LeaseRecord.model_validate(row) for row in rows],
    )


__all__ = [
    "ENQUEUE_CHUNK",
    "Call",
    "ack",
    "ack_many",
    "backfill_advance",
    "backfill_begin",
    "backfill_cancel",
    "backfill_finish",
    "backfill_pause",
    "backfill_resume",
    "backfill_status",
    "backfills",
    "cancel",
    "cancel_where",
    "citus_coordinator",
    "citus_installed",
    "claim",
    "database_now",
    "emit_event",
    "enqueue",
    "enqueue_batch",
    "enqueue_chunks",
    "enqueue_many",
    "enqueue_spec",
    "fence_run",
    "fork",
    "get_job",
    "heartbeat",
    "heartbeat_many",
    "job_payload",
    "job_steps",
    "leader_acquire",
    "leader_release",
    "leaders",
    "lease_acquire",
    "lease_holds",
    "lease_release",
    "lease_renew",
    "leases",
    "limit_gauges",
    "limit_put",
    "limit_remove",
    "limit_stats",
    "limits",
    "list_jobs",
    "nack",
    "nack_many",
    "outbox_stats",
    "pause_queue",
    "progress",
    "promote",
    "promote_where",
    "purge",
    "purge_outbox",
    "queue_gauges",
    "queue_stats",
    "relay",
    "remove",
    "remove_where",
    "requeue",
    "requeue_where",
    "resume_queue",
    "retention_policy",
    "retention_put",
    "retention_remove",
    "retention_sweep",
    "schedule_fire",
    "schedule_pause",
    "schedule_put",
    "schedule_remove",
    "schedule_resume",
    "schedules",
    "schema_floor",
    "schema_version",
    "spec_defaults",
    "stage_chunks",
    "stage_many",
    "stats",
    "step_invoke",
    "step_put",
    "step_sleep",
    "step_unwound",
    "step_wait",
    "tenant_bind",
    "tenant_bindings",
    "tenant_unbind",
    "unserved_jobs",
    "wake_tokens",
    "watch_outcome",
    "watch_token",
    "worker_heartbeat",
    "worker_stop",
    "worker_token",
    "workers",
]
