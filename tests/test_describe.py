"""`sqljobs describe`: the catalog of an app's jobs and tasks, and of the job-type registry."""

from __future__ import annotations

import json
from typing import Annotated, Any

import psycopg
import pytest
from pydantic import BaseModel, SecretStr
from typer.testing import CliRunner

from sqljobs import App, JobContext, PersonalData, RetryPolicy, key
from sqljobs._cli import app as cli
from sqljobs._client import introspection
from sqljobs._client.connection import Client
from sqljobs._declare.catalog import declared_job_type_writes

runner = CliRunner()

app = App()
app.limit("everything", scope="global", concurrency=50)
app.limit("mail_queue", scope="queue", target="mail", rate=(10, 1.0))


class Signup(BaseModel):
    email: Annotated[str, PersonalData]
    token: SecretStr
    account: str


class Report(BaseModel):
    day: str


@app.job(name="mail.welcome", queue="mail", retry=RetryPolicy(max_attempts=5, base_s=2),
         timeout=20, concurrency=3, limit=key("account", 1))
def welcome(ctx: JobContext, payload: Signup) -> None:
    return None


@app.job(name="report.daily")
def daily(ctx: JobContext, payload: Report) -> None:
    return None


@app.task(cron="0 2 * * *", timezone="Europe/Paris", name="cleanup.nightly", queue="ops")
def nightly(ctx: JobContext) -> None:
    return None


def describe(*args: str) -> Any:
    return runner.invoke(cli, ["describe", *args], env={"COLUMNS": "250"})


def test_describe_json_is_the_catalog_of_the_app() -> None:
    result = describe("--app", "tests.test_describe:app", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    jobs = {job["name"]: job for job in found["jobs"]}
    assert sorted(jobs) == ["cleanup.nightly", "mail.welcome", "report.daily"]
    welcome = jobs["mail.welcome"]
    assert welcome["queue"] == "mail" and welcome["timeout_s"] == 20
    assert welcome["retry"] == {"max_attempts": 5, "base_s": 2}
    assert welcome["limits"] == ["everything", "mail.welcome", "mail.welcome:account",
                                 "mail_queue"]
    assert welcome["sensitive"] == ["token"] and welcome["personal"] == ["email"]
    schema = welcome["payload_schema"]
    assert schema["title"] == "Signup" and set(schema["properties"]) == {"email", "token",
                                                                         "account"}
    assert jobs["report.daily"]["limits"] == ["everything"]  # default queue: not mail's
    assert jobs["report.daily"]["sensitive"] == [] and jobs["report.daily"]["cron"] is None
    assert jobs["cleanup.nightly"]["cron"] == {"cron": "0 2 * * *", "timezone": "Europe/Paris",
                                               "catch_up": "latest"}
    assert found["tasks"] == [{"name": "cleanup.nightly", "job": "cleanup.nightly",
                               "cron": "0 2 * * *", "timezone": "Europe/Paris",
                               "catch_up": "latest"}]
    assert {limit["name"] for limit in found["limits"]} == {
        "everything", "mail_queue", "mail.welcome", "mail.welcome:account"}


def test_describe_prints_a_table_and_the_personal_data_check() -> None:
    table = describe("--app", "tests.test_describe:app")
    assert table.exit_code == 0, table.output
    assert "mail.welcome" in table.output and "0 2 * * * (Europe/Paris)" in table.output
    personal = describe("--app", "tests.test_describe:app", "--personal-data", "--json")
    assert json.loads(personal.output) == {"personal_data": [
        {"name": "mail.welcome", "personal": ["email"], "sensitive": ["token"]}]}


def test_describe_without_an_app_reads_the_registry(conn: psycopg.Connection[Any],
                                                    db_dsn: str) -> None:
    client = Client(conn)
    stored = client.run(introspection.job_types())
    client.run_all(declared_job_type_writes([h.definition for h in app.jobs.values()], stored))
    # a second worker start writes nothing: the registry already holds these
    again = declared_job_type_writes([h.definition for h in app.jobs.values()],
                                     client.run(introspection.job_types()))
    assert again == []
    result = runner.invoke(cli, ["describe", "--json", "--dsn", db_dsn])
    assert result.exit_code == 0, result.output
    jobs = {job["name"]: job for job in json.loads(result.output)["jobs"]}
    assert jobs["mail.welcome"]["sensitive"] == ["token"]
    assert jobs["mail.welcome"]["origin"] == "declared"
    assert jobs["mail.welcome"]["payload_schema"]["title"] == "Signup"


def test_describe_refuses_a_bad_app_target() -> None:
    result = describe("--app", "tests.test_describe:nothing_here")
    assert result.exit_code == 2 and "cannot load" in result.output


@pytest.mark.parametrize(("target", "expected"), [
    ("examples.transfer.app:app", [
        {"name": "orders.export", "kind": "export", "url": "file:///tmp/orders-export",
         "format": "jsonl", "page": 10000, "tenant_column": None},
        {"name": "orders.import", "kind": "import", "url": "", "format": "csv",
         "page_bytes": 4194304, "max_record_bytes": 4096, "tenant_field": None}]),
    ("examples.reindex.app:app", [
        {"name": "articles.search", "kind": "reindex", "index": "PostgresSearchIndex",
         "batch": 500, "source": "select id, title, body, published from public.articles"}]),
    ("examples.partitions.app:app", [
        {"name": "events.partitions", "kind": "partitions", "table": "public.events",
         "every": "day", "ahead": 3, "retention_s": 90 * 86400.0, "cron": "5 * * * *"}]),
])
def test_describe_lists_the_export_import_reindex_and_partitions_factories(
        target: str, expected: list[dict[str, Any]]) -> None:
    described = runner.invoke(cli, ["describe", "--app", target, "--json"])
    assert described.exit_code == 0, described.output
    found = json.loads(described.output)
    assert found["factories"] == expected
    assert {f["name"] for f in expected} <= {j["name"] for j in found["jobs"]}, \
        "each factory is an ordinary job beside the others"
    table = runner.invoke(cli, ["describe", "--app", target]).output
    assert "# data factories" in table
    for factory in expected:
        assert f"{factory['name']}\t{factory['kind']}\t{{" in table, table
