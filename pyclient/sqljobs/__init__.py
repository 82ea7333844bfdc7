"""sqljobs: durable jobs, steps and schedules, with PostgreSQL as the engine.

The public surface is what this module exports; modules starting with `_` are private.
The package is layered, each layer a sub-package that imports only the layers below it
(docs/design/package-layers.md):

    sqljobs.client    statements, records, errors, connections, transactions, results, locks
    sqljobs.declare   App, jobs, tasks, retry policies, schedules, limits
    sqljobs.runtime   worker, durable steps, context, scheduler, relay
    sqljobs.cli       the `sqljobs` command; sqljobs.demo, the demo
    sqljobs.schema    installing and upgrading the schema (and sqljobs.alembic for hosts)
    sqljobs.dev       the embedded PostgreSQL

Importing `sqljobs` loads the client and declaration layers only: the runtime names
below (Worker, JobContext, Steps, ...) are imported on first use, so a producer that
only enqueues never loads the worker.
"""

from __future__ import annotations

import importlib
import secrets
from typing import TYPE_CHECKING, Any

from sqljobs.client import queries
from sqljobs.client.connection import AsyncClient, Client
from sqljobs.client.errors import (
    ConfigurationError,
    DatabaseError,
    DuplicateJob,
    InvalidArgument,
    InvalidJobType,
    InvalidPayload,
    InvalidRetention,
    JobFinished,
    JobLive,
    JobNotFound,
    JobNotRequeueable,
    JobRunning,
    JobTypeNotFound,
    LeaseLost,
    LimitNotFound,
    LockBusy,
    LockLost,
    NotLeader,
    PayloadTooLarge,
    QueuesRequired,
    ReservedStepName,
    ScheduleNotFound,
    SchemaError,
    SqljobsError,
    TenantRefused,
    UnknownJob,
    UnknownRetentionKey,
)
from sqljobs.client.records import (
    BulkMoved,
    ClaimedJob,
    Enqueued,
    JobRecord,
    JobSpec,
    JobState,
    QueueStats,
    Settled,
    Staged,
)
from sqljobs.client.results import (
    JobCancelled,
    JobDead,
    JobError,
    JobFailed,
    KeyBusy,
    ResultTimeout,
)
from sqljobs.declare.app import App
from sqljobs.declare.control import Retry, Snooze
from sqljobs.declare.jobs import JobHandle, RetryPolicy
from sqljobs.declare.limits import key
from sqljobs.declare.redaction import PersonalData, Sensitive

if TYPE_CHECKING:
    from sqljobs.runtime.context import JobContext
    from sqljobs.runtime.relay import Relay
    from sqljobs.runtime.scheduler import Scheduler
    from sqljobs.runtime.steps import (
        Event,
        EventTimeout,
        StepNameReused,
        Steps,
        StepTimeout,
    )
    from sqljobs.runtime.stopping import RunCancelled
    from sqljobs.runtime.worker import Worker

# Public names that live in the runtime layer, loaded when first asked for.
_RUNTIME = {
    "JobContext": "sqljobs.runtime.context",
    "RunCancelled": "sqljobs.runtime.stopping",
    "Relay": "sqljobs.runtime.relay",
    "Scheduler": "sqljobs.runtime.scheduler",
    "Event": "sqljobs.runtime.steps",
    "EventTimeout": "sqljobs.runtime.steps",
    "StepNameReused": "sqljobs.runtime.steps",
    "StepTimeout": "sqljobs.runtime.steps",
    "Steps": "sqljobs.runtime.steps",
    "Worker": "sqljobs.runtime.worker",
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
    "App",
    "AsyncClient",
    "BulkMoved",
    "ClaimedJob",
    "Client",
    "ConfigurationError",
    "DatabaseError",
    "DuplicateJob",
    "Enqueued",
    "Event",
    "EventTimeout",
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
    "KeyBusy",
    "LeaseLost",
    "LimitNotFound",
    "LockBusy",
    "LockLost",
    "NotLeader",
    "PayloadTooLarge",
    "PersonalData",
    "QueueStats",
    "QueuesRequired",
    "Relay",
    "ReservedStepName",
    "ResultTimeout",
    "Retry",
    "RetryPolicy",
    "RunCancelled",
    "ScheduleNotFound",
    "Scheduler",
    "SchemaError",
    "Sensitive",
    "Settled",
    "Snooze",
    "SqljobsError",
    "Staged",
    "StepNameReused",
    "StepTimeout",
    "Steps",
    "TenantRefused",
    "UnknownJob",
    "UnknownRetentionKey",
    "Worker",
    "fresh_key",
    "key",
    "queries",
]
