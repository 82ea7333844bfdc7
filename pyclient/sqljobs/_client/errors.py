"""Exceptions, keyed by SQLSTATE.

Every coded error the SQL raises (class `SJ`, see `jobs.error_codes()` and
docs/reference/errors.md) has exactly one exception class here, registered with its
SQLSTATE. `translate` is the one boundary that turns a psycopg error into ours; it never
parses message text.
"""

from __future__ import annotations

from typing import ClassVar

import psycopg


def public_name(cls: type) -> None:
    """Name an exception class by its public path (`sqljobs.DuplicateJob`) in tracebacks
    and in the error records a worker stores, whichever private module defines it."""
    if cls.__module__.startswith("sqljobs._"):
        cls.__module__ = "sqljobs"


class SqljobsError(Exception):
    """Base class of every error sqljobs raises."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        public_name(cls)


class SchemaError(SqljobsError):
    """The database has no sqljobs schema, or an older one than this client needs."""


class ConfigurationError(SqljobsError):
    """The application or a declaration is set up wrongly (found before any I/O)."""


class InvalidPayload(SqljobsError, ValueError):
    """A payload does not validate as its job's declared model (nothing was written).

    In a worker, the job fails terminally with `last_error.kind = "invalid_payload"`.
    """

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class UnknownJob(SqljobsError, LookupError):
    """No job of that name is declared on this app."""


class DatabaseError(SqljobsError):
    """A coded error raised by the sqljobs SQL functions.

    `sqlstate`, `detail` and `hint` come from the server; `name` is the stable symbolic
    name of the code (e.g. ``lease_lost``).
    """

    sqlstate: ClassVar[str] = "SJ000"
    name: ClassVar[str] = "sqljobs_error"
    _registry: ClassVar[dict[str, type[DatabaseError]]] = {}

    def __init_subclass__(cls, *, sqlstate: str, name: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if sqlstate in DatabaseError._registry:
            raise TypeError(f"SQLSTATE {sqlstate} is registered twice")
        cls.sqlstate = sqlstate
        cls.name = name
        DatabaseError._registry[sqlstate] = cls

    def __init__(self, message: str, *, detail: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail or None
        self.hint = hint or None

    def __str__(self) -> str:
        parts = [self.message]
        if self.detail:
            parts.append(f"detail: {self.detail}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    @classmethod
    def for_sqlstate(cls, sqlstate: str) -> type[DatabaseError] | None:
        return cls._registry.get(sqlstate)

    @classmethod
    def registry(cls) -> dict[str, type[DatabaseError]]:
        return dict(cls._registry)


class InvalidArgument(DatabaseError, ValueError, sqlstate="SJ001", name="invalid_argument"):
    """An argument is missing, malformed or out of range."""


class PayloadTooLarge(DatabaseError, ValueError, sqlstate="SJ002", name="payload_too_large"):
    """A payload is larger than `jobs.max_payload_bytes()`."""


class DuplicateJob(DatabaseError, sqlstate="SJ003", name="duplicate_job"):
    """`on_conflict="error"` and the idempotency key already has a job."""


class LeaseLost(DatabaseError, sqlstate="SJ004", name="lease_lost"):
    """The caller's claim no longer holds the job: the run must stop."""


class QueuesRequired(DatabaseError, ValueError, sqlstate="SJ005", name="queues_required"):
    """A claim was asked for no queue."""


class JobNotFound(DatabaseError, LookupError, sqlstate="SJ006", name="job_not_found"):
    """No job has that id."""


class JobNotRequeueable(DatabaseError, sqlstate="SJ007", name="job_not_requeueable"):
    """The job succeeded; a success is not run again."""


class JobLive(DatabaseError, sqlstate="SJ008", name="job_live"):
    """The job is still live (ready, running, parked or interrupted)."""


class JobRunning(DatabaseError, sqlstate="SJ009", name="job_running"):
    """A worker is running the job."""


class JobFinished(DatabaseError, sqlstate="SJ010", name="job_finished"):
    """The job already reached a final state."""


class ReservedStepName(DatabaseError, ValueError, sqlstate="SJ011", name="reserved_step_name"):
    """A step name starts with `sqljobs.`: those names are the runtime's own (sagas)."""


class LimitNotFound(DatabaseError, LookupError, sqlstate="SJ013", name="limit_not_found"):
    """No limit has that name."""


class InvalidRetention(DatabaseError, ValueError, sqlstate="SJ014", name="invalid_retention"):
    """A retention age is negative or not a number, or a purge batch is below 1."""


class UnknownRetentionKey(DatabaseError, ValueError, sqlstate="SJ015",
                          name="unknown_retention_key"):
    """A retention policy names something other than a final state, awaited or events."""


class JobTypeNotFound(DatabaseError, LookupError, sqlstate="SJ016", name="job_type_not_found"):
    """No job type (jobs.job_type) has that name."""


class InvalidJobType(DatabaseError, ValueError, sqlstate="SJ017", name="invalid_job_type"):
    """A job type definition is refused: an unknown field, a bad value or a bad path."""


class TenantRefused(DatabaseError, PermissionError, sqlstate="SJ018", name="tenant_refused"):
    """The session is bound to a tenant (its login role, or `sqljobs.tenant`) and the call
    named another tenant, another tenant's job, or a function that acts on every tenant."""


class SettingRefused(DatabaseError, PermissionError, sqlstate="SJ019", name="setting_refused"):
    """A session setting would widen what the caller may do: `jobs.fake_now` (the test
    clock) set by a role that is neither a superuser nor the schema's owner."""


class WorkerIdTaken(DatabaseError, sqlstate="SJ020", name="worker_id_taken"):
    """A live worker of that id was registered by another login role: give this worker
    another id (`sqljobs worker --id`), or let an operator remove the row."""


class StepNotFound(DatabaseError, LookupError, sqlstate="SJ021", name="step_not_found"):
    """A fork names a step the job's stored history does not have (the detail lists
    the steps it has)."""


class TenantPolicyRefused(DatabaseError, sqlstate="SJ022", name="tenant_policy"):
    """An enqueue breaks its job type's tenant policy: the type requires a tenant and
    none was given (a bound session always gives its own), or forbids one."""


class InvalidActor(DatabaseError, ValueError, sqlstate="SJ023", name="invalid_actor"):
    """An actor (who asked for a job or an event) is not a non-empty JSON string or
    object of at most 512 bytes. Nothing was written."""


class NotLeader(DatabaseError, sqlstate="SJ030", name="not_leader"):
    """A scheduler fire whose leader token no longer holds the live lease: stop dispatching."""


class ScheduleNotFound(DatabaseError, LookupError, sqlstate="SJ031", name="schedule_not_found"):
    """No schedule has that name."""


class BackfillError(SqljobsError):
    """Base class of the backfill ledger's errors (SJ040 to SJ046, each a DatabaseError)."""


class BackfillEnvironmentRefused(DatabaseError, BackfillError, PermissionError,
                                 sqlstate="SJ040", name="backfill_environment_refused"):
    """The backfill declares `environments=[...]` and this environment is not one of them."""


class BackfillRequiresUnmet(DatabaseError, BackfillError,
                            sqlstate="SJ041", name="backfill_requires_unmet"):
    """A backfill named in `requires=[...]` has not completed in this environment."""


class BackfillChecksumChanged(DatabaseError, BackfillError,
                              sqlstate="SJ042", name="backfill_checksum_changed"):
    """The backfill completed here under another declaration (checksum): it is reported,
    not run again; start it with `rerun=True` to run it again."""


class BackfillBusy(DatabaseError, BackfillError,
                   sqlstate="SJ043", name="backfill_busy"):
    """Another live job is running this backfill (environment, name, scope)."""


class BackfillNotFound(DatabaseError, BackfillError, LookupError,
                       sqlstate="SJ044", name="backfill_not_found"):
    """No backfill of that name and scope has run in this environment."""


class BackfillState(DatabaseError, BackfillError,
                    sqlstate="SJ045", name="backfill_state"):
    """Pause, resume or cancel of a backfill whose status does not allow it."""


class BackfillStalled(DatabaseError, BackfillError,
                      sqlstate="SJ046", name="backfill_stalled"):
    """The backfill's last batch left fewer rows handled than its declared `count`
    (`jobs.backfill_finish` answered 'stalled'; the ledger row says so)."""


class WebhookError(SqljobsError):
    """Base class of the outbound webhooks' refusals (SJ050 to SJ052). Each is terminal for
    its job: retrying cannot change the answer."""


class WebhookDisabled(DatabaseError, WebhookError, sqlstate="SJ050", name="webhook_disabled"):
    """The endpoint is disabled (`jobs.webhook_disable`): the job failed before any request
    was sent, and no socket was opened."""


class WebhookRejected(DatabaseError, WebhookError, sqlstate="SJ051", name="webhook_rejected"):
    """The endpoint answered a 4xx other than 408 and 429: the event is refused, not
    retried. `status` is the HTTP status."""

    status: int | None = None


class WebhookTenantRefused(DatabaseError, WebhookError, PermissionError,
                           sqlstate="SJ052", name="webhook_tenant_refused"):
    """The event (its job's tenant, or the tenant its payload names) is not the endpoint's
    tenant: nothing was sent."""


class LedgerError(SqljobsError):
    """Base class of the ledger's refusals (SJ053, SJ054): terminal for the posting's job."""


class LedgerUnbalanced(DatabaseError, LedgerError, ValueError,
                       sqlstate="SJ053", name="ledger_unbalanced"):
    """A posting whose amounts do not sum to zero in each currency: nothing was written
    (raised before the enqueue too)."""


class LedgerPostingConflict(DatabaseError, LedgerError,
                            sqlstate="SJ054", name="ledger_posting_conflict"):
    """The posting key already names a posting with other lines: a key is ONE posting
    per ledger and tenant; post something new under a new key."""


class CitusWorkerNode(DatabaseError, SchemaError, sqlstate="SJ060", name="citus_worker_node"):
    """A schema revision was applied to a Citus worker node: sqljobs lives on the
    coordinator (its detail names it), beside the application's distributed tables.
    Nothing was installed (docs/howto-citus.md)."""


class CitusRequired(DatabaseError, SchemaError, sqlstate="SJ061", name="citus_required"):
    """`sqljobs migrate --distributed` on a database without the Citus extension: the
    distributed mode spreads the queue's tables over a Citus cluster's nodes. Nothing
    was changed (docs/howto-citus.md, "Distributed mode")."""


class JobsBeforeBuckets(DatabaseError, SchemaError, sqlstate="SJ062", name="jobs_before_buckets"):
    """`sqljobs migrate --distributed` found live jobs made before schema version 3:
    their ids do not carry their key's bucket, so distributed, a new enqueue of their key
    would not find them. Nothing was changed; let them finish (or cancel them) and run it
    again."""


class LockBusy(SqljobsError, TimeoutError):
    """`app.lock(...)` could not take the lock before its timeout: another holder has it."""


class LockLost(SqljobsError):
    """The lock's lease lapsed or passed to another holder while this one held it: the
    guarded work must stop, and writes fenced on its old token are refused."""


# What a call raises when the database is unreachable right now (a dropped connection, a
# restart, a failover): the long-running roles retry these instead of failing.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    psycopg.OperationalError, psycopg.InterfaceError, OSError)


def translate(error: psycopg.Error) -> Exception:
    """Our exception for a psycopg error: the coded class when the SQLSTATE is ours."""
    diag = error.diag
    sqlstate = diag.sqlstate or ""
    cls = DatabaseError.for_sqlstate(sqlstate)
    if cls is None:
        return error
    translated = cls(diag.message_primary or str(error), detail=diag.message_detail,
                     hint=diag.message_hint)
    translated.__cause__ = error
    return translated


__all__ = [
    "BackfillBusy",
    "BackfillChecksumChanged",
    "BackfillEnvironmentRefused",
    "BackfillError",
    "BackfillNotFound",
    "BackfillRequiresUnmet",
    "BackfillStalled",
    "BackfillState",
    "CitusRequired",
    "CitusWorkerNode",
    "ConfigurationError",
    "DatabaseError",
    "DuplicateJob",
    "InvalidActor",
    "InvalidArgument",
    "InvalidJobType",
    "InvalidPayload",
    "InvalidRetention",
    "JobFinished",
    "JobLive",
    "JobNotFound",
    "JobNotRequeueable",
    "JobRunning",
    "JobTypeNotFound",
    "JobsBeforeBuckets",
    "LeaseLost",
    "LedgerError",
    "LedgerPostingConflict",
    "LedgerUnbalanced",
    "LimitNotFound",
    "LockBusy",
    "LockLost",
    "NotLeader",
    "PayloadTooLarge",
    "QueuesRequired",
    "ReservedStepName",
    "ScheduleNotFound",
    "SchemaError",
    "SettingRefused",
    "SqljobsError",
    "StepNotFound",
    "TenantPolicyRefused",
    "TenantRefused",
    "UnknownJob",
    "UnknownRetentionKey",
    "WebhookDisabled",
    "WebhookError",
    "WebhookRejected",
    "WebhookTenantRefused",
    "WorkerIdTaken",
]

public_name(SqljobsError)
