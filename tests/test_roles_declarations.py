"""Who writes the fleet's configuration from code (docs/design/roles.md), each role logged
in as itself: a worker registers the job types it serves but may not write the fleet's
limits (it says so once and runs with what is stored); the scheduler writes the declared
limits as it starts; an operator's `sqljobs limits sync` writes them, a worker's is
refused with its SQLSTATE.

Each test makes its own login roles (roles belong to the whole server) and drops them.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pydantic import BaseModel
from typer.testing import CliRunner

from sqljobs import App, JobContext, Scheduler, Sensitive
from sqljobs._cli import app as cli_app
from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client
from tests.processes import wait_for
from tests.worker_helpers import running

QUEUE = "declared"


class Card(BaseModel):
    number: Annotated[str, Sensitive] = ""


def make_app(dsn: str | None = None) -> App:
    example = App(dsn)
    example.limit("fleet", scope="global", concurrency=3)

    @example.job(name="declared.charge", queue=QUEUE)
    def charge(ctx: JobContext, payload: Card) -> str:
        return "charged"

    return example


app = make_app()  # `sqljobs limits sync tests.test_roles_declarations:app --dsn ...`


@pytest.fixture
def login(conn: psycopg.Connection[Any], db_dsn: str) -> Iterator[Callable[[str], str]]:
    """login(role) -> the DSN of a new login role granted that one sqljobs role."""
    made: list[str] = []

    def make(granted: str) -> str:
        role = f"decl_{secrets.token_hex(4)}"
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(granted),
                                                      sql.Identifier(role)))
        made.append(role)
        return make_conninfo(db_dsn, user=role)

    yield make
    for role in made:
        conn.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                     "where usename = %s", (role,))
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def stored_limits(conn: psycopg.Connection[Any]) -> list[str]:
    return sorted(limit.name for limit in Client(conn).run(queries.limits()))


def test_a_worker_registers_its_job_types_but_may_not_write_the_fleets_limits(
        conn: psycopg.Connection[Any], login: Callable[[str], str],
        caplog: pytest.LogCaptureFixture) -> None:
    job = Client(conn).run(queries.enqueue("declared.charge", "c1", {"number": "4242"},
                                           {"queue": QUEUE}))
    worker_app = make_app(login("sqljobs_worker"))
    try:
        with caplog.at_level(logging.WARNING), running(worker_app):
            wait_for(lambda: conn.execute("select state::text from jobs.job where id = %s",
                                          (job.id,)).fetchone() == ("succeeded",),
                     "the worker login to run the job")
    finally:
        worker_app.close()
    assert stored_limits(conn) == [], "a worker's role writes no fleet limit"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("the declared limits (fleet) are not stored as declared, and this role may "
               "not write them" in w and "sqljobs limits sync" in w for w in warnings), warnings
    # the job types it serves are registered, with the paths they hide
    types = {t.name: t for t in Client(conn).run(introspection.job_types())}
    assert types["declared.charge"].sensitive_paths == ["number"]


def test_the_scheduler_writes_the_declared_limits_as_it_starts(
        conn: psycopg.Connection[Any], login: Callable[[str], str]) -> None:
    scheduler_app = make_app(login("sqljobs_scheduler"))
    scheduler = Scheduler(scheduler_app, install_signals=False)
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(scheduler.run()))
    thread.start()
    try:
        wait_for(lambda: stored_limits(conn) == ["fleet"], "the scheduler login's limit write")
    finally:
        scheduler.stop()
        thread.join(60)
        scheduler_app.close()
    assert code == [0]
    [fleet] = Client(conn).run(queries.limits())
    assert (fleet.scope, fleet.concurrency, fleet.origin) == ("global", 3, "declared")


def test_limits_sync_is_an_operators_deploy_step_and_refused_to_a_worker(
        conn: psycopg.Connection[Any], login: Callable[[str], str]) -> None:
    runner = CliRunner()
    target = "tests.test_roles_declarations:app"
    refused = runner.invoke(cli_app, ["limits", "sync", target, "--dsn", login("sqljobs_worker")])
    assert refused.exit_code != 0
    assert "42501" in refused.output, refused.output  # insufficient_privilege, no traceback
    assert "Traceback" not in refused.output
    assert stored_limits(conn) == []
    synced = runner.invoke(cli_app, ["limits", "sync", target, "--dsn",
                                     login("sqljobs_operator")])
    assert synced.exit_code == 0, synced.output
    assert "1 declared limit(s) written, 0 already stored" in synced.output
    assert stored_limits(conn) == ["fleet"]
