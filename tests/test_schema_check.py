"""The client checks the installed schema when it opens.

Missing or older than this client needs: `SchemaError`, naming the command to run
(`sqljobs migrate`). Newer than this client can use (its floor, `jobs.schema_floor()`,
is above the client's schema version): `SchemaError`, saying to upgrade sqljobs.
Current: the app opens. Sync and async alike; the long-running roles check the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
import pytest
from pydantic import BaseModel

import sqljobs
from sqljobs._schema import migrate

OLD_SCHEMA = """
create or replace function jobs.schema_version() returns integer
language sql immutable set search_path = '' as $$ select 0 $$
"""


def open_sync(dsn: str) -> None:
    app = sqljobs.App(dsn, min_size=1, max_size=1)
    app.open()
    app.close()


def open_async(dsn: str) -> None:
    async def scenario() -> None:
        app = sqljobs.App(dsn, min_size=1, max_size=1)
        await app.open_async()
        await app.close_async()

    asyncio.run(scenario())


OPENERS = pytest.mark.parametrize("open_app", [open_sync, open_async], ids=["sync", "async"])
Opener = Callable[[str], None]


@OPENERS
def test_empty_database_says_to_install(empty_db: str, open_app: Opener) -> None:
    with pytest.raises(sqljobs.SchemaError) as raised:
        open_app(empty_db)
    message = str(raised.value)
    assert "sqljobs migrate" in message
    assert "install" in message
    assert "password" not in message


@OPENERS
def test_old_schema_says_to_upgrade(empty_db: str, open_app: Opener) -> None:
    migrate.upgrade(empty_db)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute(OLD_SCHEMA)
    with pytest.raises(sqljobs.SchemaError) as raised:
        open_app(empty_db)
    message = str(raised.value)
    assert "sqljobs migrate" in message
    assert "upgrade" in message
    assert "version 0" in message


def raise_the_floor(dsn: str) -> None:
    """The schema of a future release that dropped what this client calls."""
    migrate.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create or replace function jobs.schema_floor() returns integer "
                     "language sql immutable set search_path = '' as $$ select 99 $$")


@OPENERS
def test_a_schema_that_no_longer_serves_this_client_says_to_upgrade_sqljobs(
        empty_db: str, open_app: Opener) -> None:
    raise_the_floor(empty_db)
    with pytest.raises(sqljobs.SchemaError) as raised:
        open_app(empty_db)
    message = str(raised.value)
    assert "serves clients of schema version 99 and newer" in message
    assert "upgrade the sqljobs package" in message


class Parcel(BaseModel):
    n: int


def worker(app: sqljobs.App) -> sqljobs.Worker:
    return sqljobs.Worker(app, install_signals=False)


def relay(app: sqljobs.App) -> sqljobs.Relay:
    return sqljobs.Relay(app, install_signals=False)


def scheduler(app: sqljobs.App) -> sqljobs.Scheduler:
    return sqljobs.Scheduler(app, install_signals=False)


@pytest.mark.parametrize("role", [worker, relay, scheduler])
def test_a_role_refuses_to_start_on_a_schema_that_no_longer_serves_it(
        empty_db: str, role: Callable[[sqljobs.App], sqljobs.Worker | sqljobs.Relay
                                       | sqljobs.Scheduler],
        caplog: pytest.LogCaptureFixture) -> None:
    """The worker, relay and scheduler check through their shared skeleton, not App."""
    raise_the_floor(empty_db)
    app = sqljobs.App(empty_db, min_size=1, max_size=1)

    @app.job(name="parcels.ship")
    def ship(ctx: sqljobs.JobContext, payload: Parcel) -> None: ...

    started = role(app)
    with caplog.at_level(logging.INFO, logger="sqljobs"), \
            pytest.raises(sqljobs.SchemaError) as raised:
        started.run()
    message = str(raised.value)
    assert "serves clients of schema version 99 and newer" in message
    assert "upgrade the sqljobs package" in message
    assert not [r for r in caplog.records if " started: " in r.getMessage()]
    with psycopg.connect(empty_db) as conn:  # it wrote nothing: no worker, no lease
        assert conn.execute("select count(*) from jobs.worker").fetchone() == (0,)


@OPENERS
def test_current_schema_opens(db_dsn: str, open_app: Opener) -> None:
    open_app(db_dsn)


def test_schema_error_is_a_sqljobs_error() -> None:
    assert issubclass(sqljobs.SchemaError, sqljobs.SqljobsError)
