"""What an application declares in code, written to the database as a role starts.

The declared limits hold from the first claim on, and the declared job types are
registered so that every viewer redacts what the models mark sensitive. Workers and
the scheduler write them as they start: the job types through `jobs.job_type_declare`
(new ones, or more hidden paths, never fewer), the limits through `jobs.limit_put`,
which is fleet-wide configuration: the scheduler's role may write it, a worker's may
not (an operator's may too: `sqljobs limits sync`). A role that may not write what
differs says so once, and runs with what is stored (docs/design/roles.md).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from sqljobs._client import introspection, queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import TenantRefused
from sqljobs._declare.catalog import declared_job_type_writes
from sqljobs._declare.limits import declared_writes
from sqljobs._declare.protocols import Declared

# what a role may not do: a missing EXECUTE grant, or a tenant binding (fleet-wide writes)
REFUSED = (psycopg.errors.InsufficientPrivilege, TenantRefused)


def refusal(error: Exception) -> str:
    """Why this role may not write fleet-wide configuration, in a few words."""
    if isinstance(error, TenantRefused):
        return "a tenant-bound worker may not write them"
    return f"this role may not write them ({str(error).splitlines()[0]})"


async def write_declarations(client: AsyncClient, app: Declared, *, log: logging.Logger,
                             extra: dict[str, Any]) -> None:
    """Register the declared job types, and write the declared limits that are missing or
    changed; log what this role may not write."""
    try:
        await client.run_all(declared_job_type_writes(
            [h.definition for h in app.jobs.values()],
            await client.run(introspection.job_types()),
            getattr(app, "factories", None)))  # (App's: each data factory's kind, settings)
    except REFUSED as error:
        log.warning("the declared job types are not registered, and %s: until an unbound "
                    "worker or the scheduler does, views redact by what is stored",
                    refusal(error), extra=extra)
    if not app.declared_limits:
        return
    try:
        writes = declared_writes(app.declared_limits.values(),
                                 await client.run(queries.limits()))
        await client.run_all(writes)
    except REFUSED as error:
        log.warning("the declared limits (%s) are not stored as declared, and %s: the "
                    "scheduler writes them as it starts (role sqljobs_scheduler), or run "
                    "`sqljobs limits sync APP` as an operator; until then the stored "
                    "limits hold", ", ".join(sorted(app.declared_limits)), refusal(error),
                    extra=extra)


__all__ = ["write_declarations"]
