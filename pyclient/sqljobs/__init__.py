"""sqljobs: durable jobs, steps and schedules, with PostgreSQL as the engine.

The public surface is what this module exports; modules starting with `_` are private.
The package is layered, each layer a sub-package that imports only the layers below it
(docs/design/package-layers.md):

    sqljobs._client    statements, records, errors, connections, transactions, results, locks
    sqljobs._declare   App, jobs, tasks, retry policies, schedules, limits
    sqljobs._runtime   worker, durable steps, context, scheduler, relay
    sqljobs._cli       the `sqljobs` command; sqljobs._demo, the demo
    sqljobs._schema    installing and upgrading the schema (and sqljobs.alembic for hosts)
    sqljobs._dev       the embedded PostgreSQL

Importing `sqljobs` loads the client and declaration layers only: the runtime names
below (Worker, JobContext, Steps, ...) are imported on first use, so a producer that
only enqueues never loads the worker.
"""

from __future__ import annotations

import importlib
import secrets
from typing import TYPE_CHECKING, Any

from sqljobs import errors, queries, records
from sqljobs._app import (
    App,
    BackfillHandle,
    Batch,
    ConsumerBatch,
    ConsumerFenced,
    ConsumerHandle,
    ConsumerSelfEnqueue,
    Document,
    ImportPage,
    LedgerHandle,
    Limits,
    PostgresSearchIndex,
    PurgeHandle,
    PurgeTable,
    ReceivedEvent,
    Schedules,
    SearchIndex,
    Source,
    TableSource,
    TransferRefused,
    WebhookEvent,
    WebhookFailed,
    WebhookHandle,
    WebhookReceiver,
)
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import (
    BackfillBusy,
    BackfillChecksumChanged,
    BackfillEnvironmentRefused,
    BackfillError,
    BackfillNotFound,
    BackfillRequiresUnmet,
    BackfillStalled,
    BackfillState,
    CitusRequired,
    CitusWorkerNode,
    ConfigurationError,
    DatabaseError,
    DuplicateJob,
    InvalidActor,
    InvalidArgument,
    InvalidJobType,
    InvalidPayload,
    InvalidRetention,
    JobFinished,
    JobLive,
    JobNotFound,
    JobNotRequeueable,
    JobRunning,
    JobsBeforeBuckets,
    JobTypeNotFound,
    LeaseLost,
    LedgerError,
    LedgerPostingConflict,
    LedgerUnbalanced,
    LimitNotFound,
    LockBusy,
    LockLost,
    NotLeader,
    PayloadTooLarge,
    QueuesRequired,
    ReservedStepName,
    ScheduleNotFound,
    SchemaError,
    SettingRefused,
    SqljobsError,
    StepNotFound,
    TenantPolicyRefused,
    TenantRefused,
    UnknownJob,
    UnknownRetentionKey,
    WebhookDisabled,
    WebhookError,
    WebhookRejected,
    WebhookTenantRefused,
    WorkerIdTaken,
)
from sqljobs._client.locks import AsyncLock, Lock
from sqljobs._client.records import (
    BulkMoved,
    ClaimedJob,
    Enqueued,
    JobRecord,
    JobSpec,
    JobState,
    QueueStats,
    Settled,
    SettledJob,
    Staged,
)
from sqljobs._client.results import (
    JobCancelled,
    JobDead,
    JobError,
    JobFailed,
    KeyBusy,
    ResultTimeout,
)
from sqljobs._declare.control import Retry, Snooze
from sqljobs._declare.jobs import JobHandle, RetryPolicy
from sqljobs._declare.limits import key
from sqljobs._declare.redaction import PersonalData, Sensitive, redact
from sqljobs._version import SCHEMA_VERSION

if TYPE_CHECKING:
    from sqljobs._runtime.context import JobContext
    from sqljobs._runtime.relay import Relay
    from sqljobs._runtime.scheduler import Scheduler
    from sqljobs._runtime.steps import (
        Event,
        EventTimeout,
        ReplayDiverged,
        StepNameReused,
        Steps,
        StepTimeout,
    )
    from sqljobs._runtime.stopping import RunCancelled
    from sqljobs._runtime.worker import Worker

# Public names that live in the runtime layer, loaded when first asked for.
_RUNTIME = {
    "JobContext": "sqljobs._runtime.context",
    "RunCancelled": "sqljobs._runtime.stopping",
    "Relay": "sqljobs._runtime.relay",
    "Scheduler": "sqljobs._runtime.scheduler",
    "Event": "sqljobs._runtime.steps",
    "EventTimeout": "sqljobs._runtime.steps",
    "ReplayDiverged": "sqljobs._runtime.steps",
    "StepNameReused": "sqljobs._runtime.steps",
    "StepTimeout": "sqljobs._runtime.steps",
    "Steps": "sqljobs._runtime.steps",
    "Worker": "sqljobs._runtime.worker",
}


def __getattr__(name: str) -> Any:
    module = _RUNTIME.get(name)
    if module is None:
        raise AttributeError(f"module 'sqljobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def fresh_key() -> str:
    """A new random idempotency key, for a call that must always make a new job.

    sqljobs never invents a key on its own: reach for this only where a retry of the
    caller SHOULD make a second job.
    """
    return secrets.token_urlsafe(16)


__all__ = [
    "SCHEMA_VERSION",
    "App",
    "AsyncClient",
    "AsyncLock",
    "BackfillBusy",
    "BackfillChecksumChanged",
    "BackfillEnvironmentRefused",
    "BackfillError",
    "BackfillHandle",
    "BackfillNotFound",
    "BackfillRequiresUnmet",
    "BackfillStalled",
    "BackfillState",
    "Batch",
    "BulkMoved",
    "CitusRequired",
    "CitusWorkerNode",
    "ClaimedJob",
    "Client",
    "ConfigurationError",
    "ConsumerBatch",
    "ConsumerFenced",
    "ConsumerHandle",
    "ConsumerSelfEnqueue",
    "DatabaseError",
    "Document",
    "DuplicateJob",
    "Enqueued",
    "Event",
    "EventTimeout",
    "ImportPage",
    "InvalidActor",
    "InvalidArgument",
    "InvalidJobType",
    "InvalidPayload",
    "InvalidRetention",
    "JobCancelled",
    "JobContext",
    "JobDead",
    "JobError",
    "JobFailed",
    "JobFinished",
    "JobHandle",
    "JobLive",
    "JobNotFound",
    "JobNotRequeueable",
    "JobRecord",
    "JobRunning",
    "JobSpec",
    "JobState",
    "JobTypeNotFound",
    "JobsBeforeBuckets",
    "KeyBusy",
    "LeaseLost",
    "LedgerError",
    "LedgerHandle",
    "LedgerPostingConflict",
    "LedgerUnbalanced",
    "LimitNotFound",
    "Limits",
    "Lock",
    "LockBusy",
    "LockLost",
    "NotLeader",
    "PayloadTooLarge",
    "PersonalData",
    "PostgresSearchIndex",
    "PurgeHandle",
    "PurgeTable",
    "QueueStats",
    "QueuesRequired",
    "ReceivedEvent",
    "Relay",
    "ReplayDiverged",
    "ReservedStepName",
    "ResultTimeout",
    "Retry",
    "RetryPolicy",
    "RunCancelled",
    "ScheduleNotFound",
    "Scheduler",
    "Schedules",
    "SchemaError",
    "SearchIndex",
    "Sensitive",
    "SettingRefused",
    "Settled",
    "SettledJob",
    "Snooze",
    "Source",
    "SqljobsError",
    "Staged",
    "StepNameReused",
    "StepNotFound",
    "StepTimeout",
    "Steps",
    "TableSource",
    "TenantPolicyRefused",
    "TenantRefused",
    "TransferRefused",
    "UnknownJob",
    "UnknownRetentionKey",
    "WebhookDisabled",
    "WebhookError",
    "WebhookEvent",
    "WebhookFailed",
    "WebhookHandle",
    "WebhookReceiver",
    "WebhookRejected",
    "WebhookTenantRefused",
    "Worker",
    "WorkerIdTaken",
    "errors",
    "fresh_key",
    "key",
    "queries",
    "records",
    "redact",
]
