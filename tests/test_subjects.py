"""Data subjects end to end: jobs run by a real worker spread a subject's personal data
over payloads, results, progress, steps, events, keys and an app table; the export finds
every marked value, the erase leaves none in ANY table of the database, touches no other
subject, and its audit row holds counts, never values."""

from __future__ import annotations

import json
from typing import Annotated, Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from sqljobs import App, ConfigurationError, PersonalData, UnknownJob
from sqljobs.testing import assert_subject_coverage
from tests.processes import scalar, wait_for
from tests.worker_helpers import running

ANN = {"customer_id": "cust-ann-1", "email": "ann@example.com", "name": "Ann Example"}
BOB = {"customer_id": "cust-bob-2", "email": "bob@example.com", "name": "Bob Other"}


class Signup(BaseModel):
    customer_id: str
    email: Annotated[str, PersonalData]
    name: Annotated[str, PersonalData]
    plan: str = "free"


class Note(BaseModel):
    note: str


class Newsletter(BaseModel):
    email: Annotated[str, PersonalData]


def build(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="signup")
    async def signup(ctx: Any, p: Signup) -> dict[str, Any]:
        await ctx.step.run_async("remember", lambda: {"to": p.email})
        await ctx.progress_async(f"welcoming {p.name}")
        app.emit_event("customer.signed_up", {"email": p.email, "plan": p.plan})
        return {"greeting": f"Welcome, {p.name}!"}

    @app.job(name="newsletter")
    def newsletter(ctx: Any, p: Newsletter) -> None:
        return None

    @app.job(name="audit.ping")
    def ping(ctx: Any, p: Note) -> dict[str, str]:
        return {"echo": p.note}

    app.subject_of("signup", "customer_id")
    app.subject_table("public.subj_customers", subject="id", columns=["email", "name"],
                      erase="delete")
    return app


def every_table_holding(conn: psycopg.Connection[Any], value: str) -> list[str]:
    """Every table of the database (every schema but the catalogs) with a row whose text
    holds `value`."""
    tables = conn.execute(
        "select schemaname, tablename from pg_tables where schemaname not in "
        "('pg_catalog', 'information_schema') order by 1, 2").fetchall()
    holding = []
    for schema, table in tables:
        query = sql.SQL("select count(*) from {t} as r where r::text like %s").format(
            t=sql.Identifier(schema, table))
        if conn.execute(query, (f"%{value}%",)).fetchone()[0]:  # type: ignore[index]
            holding.append(f"{schema}.{table}")
    return holding


@pytest.fixture
def customers(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute("create table if not exists public.subj_customers (id text primary key, "
                 "email text, name text, plan text)")
    conn.execute("truncate public.subj_customers")
    for who in (ANN, BOB):
        conn.execute("insert into public.subj_customers values (%s, %s, %s, 'free')",
                      (who["customer_id"], who["email"], who["name"]))
    return conn


def test_coverage_lists_a_type_with_personal_data_and_no_mapping(db_dsn: str) -> None:
    app = build(db_dsn)
    assert app.subject_coverage() == ["newsletter"]
    with pytest.raises(AssertionError, match="newsletter"):
        assert_subject_coverage(app)
    app.subject_of("newsletter", "email")
    assert_subject_coverage(app)
    with pytest.raises(ConfigurationError, match="keys only"):
        app.subject_of("signup", "items[].id")
    with pytest.raises(ConfigurationError, match="twice"):
        app.subject_table("public.subj_customers", subject="id", columns=["email"])
    app.subject_of("not.declared", "x")
    with pytest.raises(UnknownJob, match=r"not\.declared"):
        app.subject_export("x")


def test_export_finds_every_value_and_erase_leaves_none_anywhere(
        db_dsn: str, customers: psycopg.Connection[Any]) -> None:
    conn = customers
    app = build(db_dsn)
    with app, running(app):
        ids = [app.jobs["signup"].enqueue(who, key=f"signup-{who['customer_id']}").id
               for who in (ANN, BOB)]
        for job_id in ids:
            wait_for(lambda job_id=job_id: scalar(
                conn, "select state::text from jobs.job where id = %s", (job_id,)
            ) == "succeeded", f"signup job {job_id}")
        # a job of another type whose result quotes Ann: found by value, not by type
        other = app.jobs["audit.ping"].enqueue({"note": "mailed ann@example.com"}, key="p1")
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (other.id,)) == "succeeded", "the ping")

    exported = app.subject_export(ANN["customer_id"])
    [job] = exported["jobs"]
    assert job["job_id"] == ids[0]
    assert job["personal"] == {"email": ["ann@example.com"], "name": ["Ann Example"]}
    assert set(exported["values"]) == {"ann@example.com", "Ann Example", "cust-ann-1"}
    assert {"jobs.job.payload", "jobs.job.result", "jobs.job.progress", "jobs.job.key",
            "jobs.step.value", "jobs.event.payload"} <= set(exported["occurrences"])
    assert exported["tables"] == {"public.subj_customers": [
        {"email": "ann@example.com", "name": "Ann Example"}]}
    before = {v: every_table_holding(conn, v) for v in exported["values"]}
    assert "jobs.step" in before["ann@example.com"] and "jobs.event" in before[
        "ann@example.com"], "the setup did not spread the data"

    done = app.subject_erase(ANN["customer_id"], actor="dpo@example.com")

    for value in exported["values"]:
        assert every_table_holding(conn, value) == [], f"{value} is still stored"
    # Bob is untouched
    assert every_table_holding(conn, "bob@example.com") == [
        "jobs.event", "jobs.job", "jobs.step", "public.subj_customers"]
    assert scalar(conn, "select key from jobs.job where id = %s", (ids[0],)) == \
        f"erased:{ids[0]}"
    assert scalar(conn, "select payload from jobs.job where id = %s", (ids[0],)) == {
        "customer_id": "[erased]", "email": "[erased]", "name": "[erased]", "plan": "free"}
    assert scalar(conn, "select result->>'greeting' from jobs.job where id = %s",
                  (ids[0],)) == "Welcome, [erased]!"
    # the audit: who, when, counts and paths; none of the values
    audit = conn.execute("select subject_hash, actor, session_role, erased from "
                         "jobs.subject_audit where id = %s", (done["audit_id"],)).fetchone()
    assert audit is not None
    assert audit[1] == "dpo@example.com" and audit[2] == "postgres"
    assert audit[3]["jobs"] == {"signup": {"jobs": 1, "paths": ["email", "name"]}}
    assert audit[3]["tables"] == {"public.subj_customers": {
        "rows": 1, "columns": ["email", "name"], "erase": "delete"}}
    assert audit[3]["rows"]["jobs.step.value"] == 1
    assert not any(v in json.dumps(audit) for v in exported["values"])
    # a second erase finds nothing more, and says so in its own audit row
    again = app.subject_erase(ANN["customer_id"])
    assert again["jobs"] == {} and again["rows"] == {} and again["tables"] == {}
    assert scalar(conn, "select count(*) from jobs.subject_audit") >= 2


app = App()  # the CLI's app: `--app tests.test_subjects:app` ($SQLJOBS_DSN)


@app.job(name="cli.newsletter")
def _cli_newsletter(ctx: Any, p: Newsletter) -> None:
    return None


def test_erase_with_vacuum_vacuums_the_tables_it_rewrote(
        db_dsn: str, customers: psycopg.Connection[Any]) -> None:
    conn = customers
    app = build(db_dsn)
    with app:
        app.jobs["signup"].enqueue(ANN, key=f"signup-{ANN['customer_id']}")
    touched = ("jobs.job", "public.subj_customers")

    def vacuums() -> dict[str, int]:
        return dict(conn.execute(  # type: ignore[arg-type]
            "select schemaname || '.' || relname, vacuum_count from pg_stat_user_tables"
            " where relid = any (%s::regclass[])", (list(touched),)).fetchall())

    before = vacuums()
    # VACUUM cannot run in a transaction block: the erase commits first, then vacuums
    done = app.subject_erase(ANN["customer_id"], actor="dpo@example.com", vacuum=True)
    assert done["rows"]["jobs.job.payload"] >= 1 and done["tables"][
        "public.subj_customers"]["rows"] == 1
    wait_for(lambda: all(vacuums()[t] > before[t] for t in touched),
             "each rewritten table vacuumed (as the statistics report it)")
    for value in ANN.values():
        assert every_table_holding(conn, value) == [], value
    assert conn.execute("select email from public.subj_customers").fetchall() == [
        (BOB["email"],)]


def test_the_cli_checks_coverage_exports_and_erases(
        db_dsn: str, customers: psycopg.Connection[Any]) -> None:
    from typer.testing import CliRunner

    from sqljobs._cli.main import app as cli

    runner = CliRunner()
    checked = runner.invoke(cli, ["subjects", "check", "--app", "tests.test_subjects:app",
                                  "--json"])
    assert checked.exit_code == 6, checked.output
    assert json.loads(checked.output) == {"unmapped": ["cli.newsletter"]}
    app.subject_of("cli.newsletter", "email")
    app.subject_table("public.subj_customers", subject="id", columns=["email", "name"])
    try:
        ok = runner.invoke(cli, ["subjects", "check", "--app", "tests.test_subjects:app"])
        assert ok.exit_code == 0, ok.output
        exported = runner.invoke(cli, ["subjects", "export", "cust-bob-2", "--app",
                                       "tests.test_subjects:app", "--dsn", db_dsn])
        assert exported.exit_code == 0, exported.output
        assert json.loads(exported.output)["tables"] == {"public.subj_customers": [
            {"email": "bob@example.com", "name": "Bob Other"}]}
        unasked = runner.invoke(cli, ["subjects", "erase", "cust-bob-2", "--app",
                                      "tests.test_subjects:app", "--dsn", db_dsn])
        assert unasked.exit_code == 3
        assert scalar(customers, "select email from public.subj_customers where id = %s",
                      ("cust-bob-2",)) == "bob@example.com", "erased without --yes"
        erased = runner.invoke(cli, ["subjects", "erase", "cust-bob-2", "--app",
                                     "tests.test_subjects:app", "--dsn", db_dsn, "--yes",
                                     "--actor", "ticket-42", "--json"])
        assert erased.exit_code == 0, erased.output
        assert json.loads(erased.output)["tables"]["public.subj_customers"]["rows"] == 1
        assert customers.execute("select email, name from public.subj_customers where "
                                 "id = 'cust-bob-2'").fetchone() == (None, None)
        assert scalar(customers, "select actor from jobs.subject_audit order by id desc "
                                 "limit 1") == "ticket-42"
    finally:
        app._subjects.paths.clear()
        app._subjects.tables.clear()


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.gdpr import app as module

    example = module.app
    example.pools.given = db_dsn
    conn.execute(module.CUSTOMERS)
    conn.execute("insert into public.customers values ('cust-42', 'cy@example.com', "
                 "'Cy Example', 'pro') on conflict do nothing")
    assert_subject_coverage(example)
    with example, running(example):
        job = module.welcome.enqueue(module.Welcome(
            customer_id="cust-42", email="cy@example.com", full_name="Cy Example"),
            key="welcome-42")
        wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                (job.id,)) == "succeeded", "the welcome")
    found = example.subject_export("cust-42")
    assert found["tables"]["public.customers"] == [
        {"email": "cy@example.com", "full_name": "Cy Example"}]
    example.subject_erase("cust-42", actor="ticket-1234")
    assert every_table_holding(conn, "cy@example.com") == []
    assert every_table_holding(conn, "Cy Example") == []
    assert conn.execute("select plan from public.customers where id = 'cust-42'"
                        ).fetchone() == ("pro",)
