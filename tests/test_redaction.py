"""Redaction end to end: a job with a SecretStr field and nested sensitive fields,
enqueued from Python and from plain SQL, run by a real `sqljobs worker` process.

The handler sees the real values; no view (jobs.job_view, `sqljobs jobs list/show`,
`sqljobs describe`), log line (the worker's captured output, caplog of an in-process
worker) or error text (last_error) shows them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, SecretStr
from typer.testing import CliRunner

from sqljobs import App, InvalidPayload, fresh_key
from sqljobs._cli import app as cli
from sqljobs._client.redaction import REDACTED, Redaction
from sqljobs._declare.redaction import payload_json, redact, redaction_of
from tests.processes import scalar, spawner, wait_for
from tests.redaction_example_app import (
    CARD,
    PASSWORD,
    QUEUE,
    SECRETS,
    SEEN_TABLE,
    SSN,
    Charge,
    Pin,
    charge_payload,
    make_app,
)
from tests.worker_helpers import running

runner = CliRunner()


def sqljobs(dsn: str, *args: str) -> Any:
    return runner.invoke(cli, [*args, "--dsn", dsn], env={"COLUMNS": "250"})


def assert_no_secret(text: str, where: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where} shows {leaked}:\n{text[-3000:]}"


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    conn.execute(SEEN_TABLE)
    conn.execute("truncate public.redaction_seen")
    example = make_app(db_dsn)
    yield example
    example.close()


# -- the markers and the payload ---------------------------------------------------------

def test_the_model_markers_give_the_paths() -> None:
    r = redaction_of(Charge)
    assert r.sensitive == ("card.number", "items[].ssn", "password")
    assert r.personal == ("card.holder", "email")
    assert redaction_of(Pin).sensitive == ("code", "pin")


def test_a_model_without_markers_has_no_redaction() -> None:
    class Plain(BaseModel):
        n: int
        tags: list[str] = []
    assert redaction_of(Plain) == Redaction()


def test_the_enqueued_payload_holds_the_real_secret_not_pydantics_mask(app: App) -> None:
    model = Charge.model_validate(charge_payload())
    assert model.model_dump(mode="json")["password"] == "**********"  # pydantic's own dump
    assert payload_json(model)["password"] == PASSWORD
    spec = app.job_handle("secure.charge").spec(model, key="k")
    assert spec.payload["password"] == PASSWORD and spec.payload["card"]["number"] == CARD
    # and it reads back into the model the handler gets
    assert Charge.model_validate(spec.payload).password.get_secret_value() == PASSWORD


def test_redact_is_one_call_for_payloads_and_texts(app: App) -> None:
    definition = app.job_handle("secure.charge").definition
    payload = charge_payload()
    shown = redact(definition, payload)
    assert shown["password"] == REDACTED and shown["card"] == {"number": REDACTED,
                                                               "holder": "Ann Example"}
    assert shown["items"] == [{"sku": "A-1", "ssn": REDACTED}]
    text = redact(definition, f"boom {CARD} / {PASSWORD}", payload=payload)
    assert text == f"boom {REDACTED} / {REDACTED}"
    record = redact(definition, {"message": f"x {SSN}", "n": int(CARD)}, payload=payload)
    assert record == {"message": f"x {REDACTED}", "n": REDACTED}


def test_an_invalid_sensitive_payload_is_refused_without_echoing_it(app: App) -> None:
    with pytest.raises(InvalidPayload) as refused:
        app.job_handle("secure.pin").enqueue({"pin": "pin-secret-77", "code": "no-code-999"},
                                             key="k")
    text = f"{refused.value} {refused.value.detail}"
    assert "no-code-999" not in text and "pin-secret-77" not in text
    assert "code" in (refused.value.detail or "")  # still says which field is wrong
    assert refused.value.__cause__ is None  # pydantic's error (with the input) is not chained


# -- a real worker process ------------------------------------------------------------

def job_view_text(conn: psycopg.Connection[Any], job_id: int) -> str:
    return str(scalar(conn, "select to_jsonb(v)::text from jobs.job_view v where id = %s",
                      (job_id,)))


def test_a_real_worker_hides_the_secrets_everywhere_but_from_the_handler(
        app: App, conn: psycopg.Connection[Any], db_dsn: str, tmp_path: Path) -> None:
    handle = app.job_handle("secure.charge")
    ok = handle.enqueue(charge_payload(), key=fresh_key()).id
    failing = handle.enqueue(charge_payload(fail=True), key=fresh_key()).id
    # the same job enqueued from plain SQL, by a service that never saw the model
    from_sql = scalar(conn, "select id from jobs.enqueue('secure.charge', 'sql-1', %s, "
                            "'{\"queue\": \"secure\", \"max_attempts\": 1}')",
                      (json.dumps(charge_payload(True)),))
    with spawner(db_dsn, tmp_path, "worker", "tests.redaction_example_app:app", "--queue",
                 QUEUE, "--log-level", "DEBUG") as spawn:
        worker = spawn()
        wait_for(lambda: scalar(conn, "select count(*) = 3 from jobs.job where state in "
                                      "('succeeded', 'failed', 'dead')"), "the three jobs")
        worker.proc.terminate()
        worker.wait(30)
        logs = worker.output()
    # the handler got the real values, the SecretStr as a SecretStr
    seen = conn.execute("select job_id, password, password_type, number, ssns "
                        "from public.redaction_seen order by job_id").fetchall()
    assert seen == [(job, PASSWORD, "SecretStr", CARD, [SSN]) for job in (ok, failing, from_sql)]
    # the failures' last_error quotes nothing (stored redacted, not only shown redacted)
    for job in (failing, from_sql):
        error = scalar(conn, "select last_error from jobs.job where id = %s", (job,))
        assert error["message"] == (f"card {REDACTED} declined for password {REDACTED}")
        assert_no_secret(json.dumps(error), f"last_error of job {job}")
    assert "declined for password" in logs  # the worker logged the failures...
    assert_no_secret(logs, "the worker's log")  # ...without the values
    # the worker registered the job type, origin declared
    paths = scalar(conn, "select sensitive_paths from jobs.job_types() "
                         "where name = 'secure.charge' and origin = 'declared'")
    assert paths == ["card.number", "items[].ssn", "password"]
    for job in (ok, failing, from_sql):
        assert_no_secret(job_view_text(conn, job), f"jobs.job_view of job {job}")
        shown = sqljobs(db_dsn, "jobs", "show", str(job))
        assert shown.exit_code == 0, shown.output
        assert "Ann Example" in shown.output  # personal data is shown, secrets are not
        assert_no_secret(shown.output, f"`sqljobs jobs show {job}`")
        as_json = sqljobs(db_dsn, "jobs", "show", str(job), "--json")
        assert_no_secret(as_json.output, f"`sqljobs jobs show {job} --json`")
    # the result echoed the card number: stored for whoever awaits it, redacted in views
    assert scalar(conn, "select result->>'echo' from jobs.job where id = %s", (ok,)) == CARD
    assert scalar(conn, "select result->>'echo' from jobs.job_view where id = %s",
                  (ok,)) == REDACTED
    for args in (["jobs", "list"], ["jobs", "list", "--json"], ["describe"],
                 ["describe", "--json"], ["describe", "--app", "tests.redaction_example_app:app",
                                          "--json"]):
        result = sqljobs(db_dsn, *args)
        assert result.exit_code == 0, result.output
        assert_no_secret(result.output, f"`sqljobs {' '.join(args)}`")


# -- an in-process worker: its log records -------------------------------------------

def test_log_records_and_invalid_payload_errors_hold_no_value(
        app: App, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture) -> None:
    failing = app.job_handle("secure.charge").enqueue(charge_payload(fail=True),
                                                      key=fresh_key()).id
    # a payload that no longer validates, written from SQL: pydantic would echo it
    bad = scalar(conn, "select id from jobs.enqueue('secure.pin', 'bad', "
                       "'{\"pin\": \"pin-secret-77\", \"code\": \"no-code-999\"}', "
                       "'{\"queue\": \"secure\", \"max_attempts\": 1}')")
    with caplog.at_level(logging.DEBUG), running(app):
        wait_for(lambda: scalar(conn, "select count(*) = 2 from jobs.job where state in "
                                      "('failed', 'dead')"), "both jobs to fail")
    records = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "declined for password" in records
    assert_no_secret(records, "the worker's log records")
    error = scalar(conn, "select last_error from jobs.job where id = %s", (bad,))
    assert error["kind"] == "invalid_payload" and "code" in error["detail"]
    for value in ("pin-secret-77", "no-code-999"):
        assert value not in json.dumps(error) and value not in records
    assert_no_secret(json.dumps(scalar(conn, "select last_error from jobs.job where id = %s",
                                       (failing,))), "last_error")


def test_a_job_only_sql_enqueues_is_redacted_once_registered_from_sql(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    conn.execute("select jobs.job_type_put('billing.export', '{\"sensitive\": "
                 "[\"api_key\", \"accounts[].iban\"], \"personal\": [\"owner\"]}')")
    job = scalar(conn, "select id from jobs.enqueue('billing.export', 'e1', "
                       "'{\"api_key\": \"sk_live_123456\", \"owner\": \"Bo\", "
                       "\"accounts\": [{\"iban\": \"DE89370400440532013000\"}]}')")
    shown = sqljobs(db_dsn, "jobs", "show", str(job))
    assert shown.exit_code == 0, shown.output
    assert "sk_live_123456" not in shown.output and "DE8937" not in shown.output
    assert "Bo" in shown.output and REDACTED in shown.output
    personal = sqljobs(db_dsn, "describe", "--personal-data", "--json")
    assert json.loads(personal.output) == {"personal_data": [
        {"name": "billing.export", "personal": ["owner"], "stored_jobs": 1}]}


def test_a_secretstr_in_a_list_and_a_dict_is_covered() -> None:
    class Vault(BaseModel):
        tokens: list[SecretStr]
        headers: dict[str, SecretStr] = {}
    r = redaction_of(Vault)
    assert r.sensitive == ("headers.*", "tokens[]")
    model = Vault(tokens=["tok-aaa", "tok-bbb"], headers={"auth": "Bearer xyz"})
    stored = payload_json(model)
    assert stored == {"tokens": ["tok-aaa", "tok-bbb"], "headers": {"auth": "Bearer xyz"}}
    assert r.payload(stored) == {"tokens": [REDACTED, REDACTED], "headers": {"auth": REDACTED}}


def test_a_role_granted_only_the_view_reads_redacted_payloads_and_no_table(
        conn: psycopg.Connection[Any]) -> None:
    conn.execute("select jobs.job_type_put('billing.export', '{\"sensitive\": [\"api_key\"]}')")
    job = scalar(conn, "select id from jobs.enqueue('billing.export', 'r1', "
                       "'{\"api_key\": \"sk_live_123456\", \"n\": 1}')")
    role = f"sqljobs_support_{fresh_key().lower().replace('-', '_')[:12]}"
    conn.execute(f'create role "{role}"')
    try:
        conn.execute(f'grant usage on schema jobs to "{role}"')
        conn.execute(f'grant select on jobs.job_view to "{role}"')
        with conn.transaction():
            conn.execute(f'set local role "{role}"')
            assert scalar(conn, "select payload from jobs.job_view where id = %s", (job,)) == {
                "api_key": REDACTED, "n": 1}
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute(f'set local role "{role}"')
            conn.execute("select payload from jobs.job where id = %s", (job,))
    finally:
        conn.execute(f'drop owned by "{role}"')
        conn.execute(f'drop role "{role}"')


@pytest.mark.parametrize("paths", [
    ("password", "card.number", "items[].ssn"),
    ("card", "items[]", "missing.key"),
    ("items.ssn", "card[]", "*"),
])
def test_python_and_sql_redact_alike(conn: psycopg.Connection[Any],
                                     paths: tuple[str, ...]) -> None:
    payload = {**charge_payload(), "n": 12345, "flag": True}
    redaction = Redaction(sensitive=paths)
    in_sql = scalar(conn, "select jobs.redact_payload(%s, %s)", (json.dumps(payload), list(paths)))
    assert in_sql == redaction.payload(payload)
    secrets = scalar(conn, "select jobs.redaction_secrets(%s, %s)",
                     (json.dumps(payload), list(paths)))
    assert set(secrets) == set(redaction.secrets_of(payload))
