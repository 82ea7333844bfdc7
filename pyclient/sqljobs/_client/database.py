"""Where the database is, and whether its schema is the one this client needs.

`resolve_dsn` finds the DSN (argument, $SQLJOBS_DSN, $DATABASE_URL);
`check_schema_version` turns `jobs.schema_version()`'s answer (and `jobs.schema_floor()`'s)
into SchemaError, naming what to run: a schema older than this client needs, or one that
no longer serves clients this old, or, on a Citus worker node, the coordinator to point
at instead. `check_schema` / `check_schema_async` ask the database and check: every role
(worker, relay, scheduler), `App.open` and the Django check call them at start.
"""

from __future__ import annotations

import os

import psycopg

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient, Client
from sqljobs._client.errors import ConfigurationError, SchemaError
from sqljobs._version import SCHEMA_VERSION

DSN_VARIABLES = ("SQLJOBS_DSN", "DATABASE_URL")


def resolve_dsn(dsn: str | None) -> str:
    """The DSN given, else $SQLJOBS_DSN, else $DATABASE_URL."""
    if dsn:
        return dsn
    for variable in DSN_VARIABLES:
        if value := os.environ.get(variable):
            return value
    raise ConfigurationError(
        "no database given: pass dsn=..., or set SQLJOBS_DSN or DATABASE_URL"
    )


# What running `queries.schema_version()` raises when there is no sqljobs schema, or one
# without jobs.schema_version(): names are resolved when the statement is parsed.
SCHEMA_MISSING = (psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedFunction)


def needs_floor(installed: int | None) -> bool:
    """Whether the schema's floor is to be read (`queries.schema_floor()`): a schema
    as new as this client's has one; an older one is refused without it."""
    return installed is not None and installed >= SCHEMA_VERSION


def check_schema(client: Client, dsn_hint: str = "<dsn>") -> None:
    """Read the installed schema's version (and floor) and `check_schema_version` it."""
    try:
        installed = client.run(queries.schema_version())
    except SCHEMA_MISSING:  # no schema at all: SchemaError says how to install it
        installed = None  # (or, on a Citus worker node, where the coordinator is)
        coordinator = (client.run(queries.citus_coordinator())
                       if client.run(queries.citus_installed()) else None)
        check_schema_version(installed, dsn_hint, citus_coordinator=coordinator)
    floor = client.run(queries.schema_floor()) if needs_floor(installed) else None
    check_schema_version(installed, dsn_hint, floor)


async def check_schema_async(client: AsyncClient, dsn_hint: str = "<dsn>") -> None:
    """`check_schema` on an async client."""
    try:
        installed = await client.run(queries.schema_version())
    except SCHEMA_MISSING:
        installed = None
        coordinator = (await client.run(queries.citus_coordinator())
                       if await client.run(queries.citus_installed()) else None)
        check_schema_version(installed, dsn_hint, citus_coordinator=coordinator)
    floor = await client.run(queries.schema_floor()) if needs_floor(installed) else None
    check_schema_version(installed, dsn_hint, floor)


def check_schema_version(installed: int | None, dsn_hint: str = "<dsn>",
                         floor: int | None = None, *,
                         citus_coordinator: str | None = None) -> None:
    """Raise SchemaError, naming the fix, when the schema is missing or older than this
    client needs, or newer than this client can use (its `floor` is above this client's
    schema version: what the client calls may be gone). `citus_coordinator`: the
    database is a Citus worker node, and sqljobs lives on that coordinator."""
    command = f"sqljobs migrate --dsn {dsn_hint}"
    if installed is None and citus_coordinator is not None:
        raise SchemaError(
            f"this database is a Citus worker node, where sqljobs has no schema: sqljobs "
            f"lives on the coordinator ({citus_coordinator}); point every sqljobs client "
            f"at it (docs/howto-citus.md)"
        )
    if installed is None:
        raise SchemaError(
            f"this database has no sqljobs schema (jobs.schema_version() is missing); "
            f"install it with: {command}"
        )
    if installed < SCHEMA_VERSION:
        raise SchemaError(
            f"this database has sqljobs schema version {installed}, but this client needs "
            f"{SCHEMA_VERSION}; upgrade it with: {command}"
        )
    if floor is not None and floor > SCHEMA_VERSION:
        raise SchemaError(
            f"this database has sqljobs schema version {installed}, which serves clients of "
            f"schema version {floor} and newer; this client is of version {SCHEMA_VERSION}: "
            "upgrade the sqljobs package (pip install -U sqljobs)"
        )


def redacted_dsn(dsn: str) -> str:
    """The DSN with any password removed, fit for an error message."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<dsn>"
    info.pop("password", None)
    host = info.get("host", "localhost")
    port = info.get("port", 5432)
    user = f"{info['user']}@" if info.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{info.get('dbname', '')}"
