"""Tenancy from Python (docs/design/tenancy.md): a worker and a producer whose login role
is bound to tenant acme act only within acme, against the real database; the pgTAP file
sqltests/test_tenancy.sql tries every function one by one.

Each test makes its own login role (roles belong to the whole server) and drops it.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from pydantic import BaseModel
from typer.testing import CliRunner

from sqljobs import App, JobContext, TenantRefused
from sqljobs._cli import app as cli_app
from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client
from tests.processes import wait_for
from tests.worker_helpers import running

QUEUE = "tenancy"


class Empty(BaseModel):
    pass


def make_app(dsn: str) -> App:
    example = App(dsn)

    @example.job(name="tenancy.echo", queue=QUEUE)
    def echo(ctx: JobContext, payload: Empty) -> dict[str, Any]:
        return {"tenant": ctx.tenant}

    @example.job(name="tenancy.parent", queue=QUEUE)
    def parent(ctx: JobContext, payload: Empty) -> Any:
        return ctx.step.invoke("child", echo, {})

    return example


@pytest.fixture
def acme_dsn(conn: psycopg.Connection[Any], db_dsn: str) -> Iterator[str]:
    """A login role holding all four sqljobs roles, bound to tenant acme: what it is
    refused, the binding refuses, not a missing grant."""
    role = f"tenancy_py_{secrets.token_hex(4)}"
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("create role {} login").format(ident))
    conn.execute(sql.SQL("grant sqljobs_producer, sqljobs_worker, sqljobs_operator, "
                         "sqljobs_reader to {}").format(ident))
    assert Client(conn).run(queries.tenant_bind(role, "acme")) is True
    # (keywords, not a URL: under the embedded server the host is a socket directory)
    yield make_conninfo(db_dsn, user=role)
    conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s",
                 (role,))
    conn.execute(sql.SQL("drop role {}").format(ident))


def enqueue(conn: psycopg.Connection[Any], name: str, key: str, tenant: str | None) -> int:
    spec = {"queue": QUEUE} if tenant is None else {"queue": QUEUE, "tenant": tenant}
    return Client(conn).run(queries.enqueue(name, key, {}, spec)).id


def row(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    found = conn.execute("select state::text, attempt, tenant, result from jobs.job "
                         "where id = %s", (job_id,)).fetchone()
    assert found is not None
    return tuple(found)


def test_a_bound_worker_runs_its_tenants_jobs_only(conn: psycopg.Connection[Any],
                                                   acme_dsn: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    globex = enqueue(conn, "tenancy.echo", "g", "globex")  # older: first in line
    untenanted = enqueue(conn, "tenancy.echo", "n", None)
    acme = enqueue(conn, "tenancy.echo", "a", "acme")
    parent = enqueue(conn, "tenancy.parent", "p", "acme")
    example = make_app(acme_dsn)
    try:
        with caplog.at_level(logging.WARNING), running(example):
            wait_for(lambda: row(conn, parent)[0] == "succeeded", "acme's parent job")
            wait_for(lambda: row(conn, acme)[0] == "succeeded", "acme's job")
    finally:
        example.close()
    assert row(conn, acme)[2:] == ("acme", {"tenant": "acme"})
    # the child step_invoke made is acme's too, and ran as acme's
    assert row(conn, parent)[3] == {"tenant": "acme"}
    children = conn.execute("select tenant from jobs.job where parent_id = %s", (parent,)
                            ).fetchall()
    assert children == [("acme",)]
    # another tenant's job, and a job of no tenant, are not the bound worker's to claim
    assert row(conn, globex)[:2] == ("ready", 0)
    assert row(conn, untenanted)[:2] == ("ready", 0)
    # the job types the app declares act on every tenant: the bound worker says why it
    # did not write them, and runs anyway
    assert any("tenant-bound worker may not write them" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_bound_producer_is_refused_every_other_tenant(conn: psycopg.Connection[Any],
                                                        acme_dsn: str) -> None:
    globex = enqueue(conn, "tenancy.echo", "g", "globex")
    before = conn.execute("select count(*) from jobs.job").fetchone()
    with psycopg.connect(acme_dsn, autocommit=True) as bound:
        client = Client(bound)
        mine = client.run(queries.enqueue("tenancy.echo", "g", {}, {"queue": QUEUE}))
        assert row(conn, mine.id)[2] == "acme", "enqueue stamps the bound tenant"
        assert mine.id != globex, "the same key in another tenant is another job"
        refusals = {
            "enqueue into globex": queries.enqueue("tenancy.echo", "x", {},
                                                   {"queue": QUEUE, "tenant": "globex"}),
            "cancel globex's job": queries.cancel(globex),
            "read globex's job": introspection.job_detail(globex),
            "a fleet-wide read": queries.queue_stats(),
            "a limit for every tenant": queries.limit_put("all", {"scope": "global",
                                                                  "concurrency": 1}),
        }
        for what, call in refusals.items():
            with pytest.raises(TenantRefused) as refused:
                client.run(call)
            assert refused.value.sqlstate == "SJ018", what
            assert isinstance(refused.value, PermissionError)
        listed = client.run(introspection.list_jobs({}, None, 100))
        assert {job.tenant for job in listed} == {"acme"}
    after = conn.execute("select count(*) from jobs.job").fetchone()
    assert after is not None and before is not None and after[0] == before[0] + 1
    assert row(conn, globex)[:2] == ("ready", 0), "the refusals changed nothing"


def test_the_cli_binds_lists_and_unbinds(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    role = f"tenancy_cli_{secrets.token_hex(4)}"
    conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
    runner = CliRunner()
    try:
        bound = runner.invoke(cli_app, ["tenants", "bind", role, "acme", "--dsn", db_dsn])
        assert bound.exit_code == 0 and f"bound role {role} to tenant acme" in bound.stdout
        moved = runner.invoke(cli_app, ["tenants", "bind", role, "globex", "--dsn", db_dsn])
        assert moved.exit_code == 0 and "rebound" in moved.stdout
        listed = runner.invoke(cli_app, ["tenants", "list", "--json", "--dsn", db_dsn])
        assert listed.exit_code == 0
        assert '"tenant": "globex"' in listed.stdout and role in listed.stdout
        unknown = runner.invoke(cli_app, ["tenants", "bind", "no_such_role_x", "acme",
                                          "--dsn", db_dsn])
        assert unknown.exit_code == 1 and "no role is named no_such_role_x" in unknown.output
        gone = runner.invoke(cli_app, ["tenants", "unbind", role, "--dsn", db_dsn])
        assert gone.exit_code == 0
        again = runner.invoke(cli_app, ["tenants", "unbind", role, "--dsn", db_dsn])
        assert again.exit_code == 4 and "bound to no tenant" in again.output
    finally:
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def test_a_bound_session_listening_on_every_channel_hears_no_other_tenants_names_or_ids(
        conn: psycopg.Connection[Any], acme_dsn: str) -> None:
    """On the wire (docs/design/tenancy.md, "Notification channels"): a session bound to
    acme LISTENs on every channel the engine notifies (jobs_wake: queue and worker
    tokens; jobs_settled: watched jobs' tokens; jobs_outbox: empty) while the unbound
    fleet enqueues, settles, cancels and stages through the outbox globex's jobs. What
    it hears are tokens only: no globex queue name, job id, worker or relay id."""
    channels = ("jobs_wake", "jobs_settled", "jobs_outbox")
    fence = f"tenancy_fence_{secrets.token_hex(4)}"
    queues = ("globex_payroll_q", "globex_ledger_q")
    worker, relay_id = "globex-worker-1", "globex-relay-1"
    with psycopg.connect(acme_dsn, autocommit=True) as listener:
        assert listener.execute("select jobs.bound_tenant()").fetchone() == ("acme",)
        for channel in (*channels, fence):
            listener.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))

        # globex's work, by the unbound fleet, each step its own transaction
        ids = [conn.execute("select id from jobs.enqueue('globex.pay', %s, '{}', %s)",
                            (f"p{i}", json.dumps({"queue": queues[0], "tenant": "globex"}))
                            ).fetchone()[0] for i in range(3)]  # type: ignore[index]
        for job_id in ids:
            conn.execute("select jobs.watch_outcome(%s)", (job_id,))  # settles notify
        claimed = conn.execute("select id, claim from jobs.claim(%s, %s, 3, 30) order by id",
                               ([queues[0]], worker)).fetchall()
        assert [c[0] for c in claimed] == ids
        conn.execute("select jobs.ack_many(%s, %s)",
                     ([c[0] for c in claimed[:2]], [c[1] for c in claimed[:2]]))
        conn.execute("select jobs.cancel(%s)", (ids[2],))  # wakes its worker, by token
        staged = conn.execute("select id from jobs.stage('globex.book', 's1', '{}', %s)",
                              (json.dumps({"queue": queues[1], "tenant": "globex"}),)
                              ).fetchone()[0]  # type: ignore[index]
        for _ in range(2):  # the relay claims the row, and publishes it at its next call
            conn.execute("select jobs.relay(10, %s, 30)", (relay_id,))
        conn.execute("select jobs.watch_outcome(%s)", (staged,))
        conn.execute("select jobs.ack(c.id, c.claim, '{}') from jobs.claim(%s, %s, 1, 30) c",
                     ([queues[1]], worker))
        ids.append(staged)

        # the other tenant's work is done: every job final, the staged row published
        wait_for(lambda: conn.execute(
            "select count(*) = 4 from jobs.job where id = any(%s) and finished_at is not null",
            (ids,)).fetchone()[0], "globex's jobs to finish")  # type: ignore[index]
        wait_for(lambda: conn.execute(
            "select published_at is not null from jobs.outbox where id = %s",
            (staged,)).fetchone()[0], "the staged row to be published")  # type: ignore[index]
        # notifications are delivered in commit order: all of them arrive before the fence
        conn.execute("select pg_notify(%s, 'end')", (fence,))
        heard: list[tuple[str, str]] = []
        for note in listener.notifies(timeout=10):
            if note.channel == fence:
                break
            heard.append((note.channel, note.payload))
        else:
            raise AssertionError(f"the fence never arrived; heard {heard}")
        # and a short poll for anything after it (there is nothing more to send)
        heard += [(n.channel, n.payload) for n in listener.notifies(timeout=0.2)]

    assert {channel for channel, _ in heard} == set(channels), heard  # (not vacuous)
    assert ("jobs_outbox", "") in heard
    secrets_ = {*queues, "globex", worker, relay_id, "globex.pay", "globex.book"}
    for channel, payload in heard:
        assert not any(s in payload for s in secrets_), (channel, payload)
        for part in payload.split(","):
            assert part not in {str(i) for i in ids}, (channel, payload)
            assert part in ("", "*") or re.fullmatch(r"[0-9a-f]{16}", part), (channel, payload)
