"""sqljobs: durable jobs, steps and schedules, with PostgreSQL as the engine.

The public surface is what this module exports; modules starting with `_` are private.
"""

from __future__ import annotations

import secrets

from sqljobs.app import App
from sqljobs.client import AsyncClient, Client
from sqljobs.context import JobContext, RunCancelled
from sqljobs.control import Retry, Snooze
from sqljobs.errors import (
    ConfigurationError,
    DatabaseError,
    DuplicateJob,
    InvalidArgument,
    InvalidPayload,
    JobFinished,
    JobLive,
    JobNotFound,
    JobNotRequeueable,
    JobRunning,
    LeaseLost,
    NotLeader,
    PayloadTooLarge,
    QueuesRequired,
    ScheduleNotFound,
    SchemaError,
    SqljobsError,
    UnknownJob,
)
from sqljobs.jobs import JobHandle, RetryPolicy
from sqljobs.models import (
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
from sqljobs.relay import Relay
from sqljobs.results import JobCancelled, JobDead, JobError, JobFailed, ResultTimeout
from sqljobs.scheduler import Scheduler
from sqljobs.steps import Event, EventTimeout, StepNameReused, Steps, StepTimeout, SyncSteps
from sqljobs.worker import Worker


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
    "InvalidPayload",
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
    "LeaseLost",
    "NotLeader",
    "PayloadTooLarge",
    "QueueStats",
    "QueuesRequired",
    "Relay",
    "ResultTimeout",
    "Retry",
    "RetryPolicy",
    "RunCancelled",
    "ScheduleNotFound",
    "Scheduler",
    "SchemaError",
    "Settled",
    "Snooze",
    "SqljobsError",
    "Staged",
    "StepNameReused",
    "StepTimeout",
    "Steps",
    "SyncSteps",
    "UnknownJob",
    "Worker",
    "fresh_key",
]
