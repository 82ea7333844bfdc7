"""One table of error codes (docs/reference/errors.md), kept in step in four places.

`jobs.error_codes()`, the comment table at the top of sql/10_errors.sql, the Python
registry (`sqljobs.errors.DatabaseError.registry()`) and docs/reference/errors.md agree
exactly; and a coded error raised by the SQL reaches Python as its class, with detail
and hint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

import sqljobs
from sqljobs._client import queries
from sqljobs._client.errors import DatabaseError
from sqljobs._client.queries import Call

ROOT = Path(__file__).resolve().parents[1]
ERRORS_SQL = ROOT / "sql" / "10_errors.sql"
ERRORS_DOC = ROOT / "docs" / "reference" / "errors.md"


def database_codes(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, str]]:
    rows = conn.execute("select sqlstate, name, meaning from jobs.error_codes()").fetchall()
    return {sqlstate: (name, meaning) for sqlstate, name, meaning in rows}


def sql_comment_codes() -> dict[str, str]:
    """The `--   SJ001     invalid_argument   raised when` lines of sql/10_errors.sql."""
    pattern = re.compile(r"^--\s+(SJ[0-9A-Z]{3})\s+([a-z_]+)\s+\S", re.MULTILINE)
    return dict(pattern.findall(ERRORS_SQL.read_text(encoding="utf-8")))


def doc_codes() -> dict[str, tuple[str, str, str]]:
    """Rows of the Markdown table: SQLSTATE -> (name, Python exception, raised when)."""
    rows: dict[str, tuple[str, str, str]] = {}
    lines = ERRORS_DOC.read_text(encoding="utf-8").splitlines()
    header = "| SQLSTATE | name | Python exception | raised when |"
    assert header in lines, f"{ERRORS_DOC.name} has no table headed {header!r}"
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"malformed row: {line}"
        code, name, exception, raised_when = cells
        assert code not in rows, f"{code} is listed twice"
        rows[code] = (name, exception, raised_when)
    return rows


def test_registry_database_and_docs_agree(conn: psycopg.Connection[Any]) -> None:
    database = database_codes(conn)
    registry = DatabaseError.registry()
    documented = doc_codes()

    assert database, "jobs.error_codes() is empty"
    assert set(registry) == set(database), "Python registry vs jobs.error_codes()"
    assert set(documented) == set(database), "docs/reference/errors.md vs jobs.error_codes()"
    assert sql_comment_codes() == {code: name for code, (name, _) in database.items()}, (
        "the comment table in sql/10_errors.sql vs jobs.error_codes()")

    for code, (name, meaning) in database.items():
        cls = registry[code]
        assert cls.sqlstate == code
        assert cls.name == name, f"{code}: Python says {cls.name}, SQL says {name}"
        doc_name, doc_exception, doc_raised_when = documented[code]
        assert doc_name == name, f"{code}: docs say {doc_name}, SQL says {name}"
        assert doc_exception == f"sqljobs.{cls.__name__}", f"{code}: docs name {doc_exception}"
        assert doc_raised_when == meaning, f"{code}: docs and jobs.error_codes() differ"
        assert getattr(sqljobs, cls.__name__) is cls, f"{cls.__name__} is not exported"


def test_codes_are_one_class(conn: psycopg.Connection[Any]) -> None:
    for code in database_codes(conn):
        assert re.fullmatch(r"SJ[0-9A-Z]{3}", code), code


@pytest.mark.parametrize("sqlstate", sorted(DatabaseError.registry()))
def test_every_code_reaches_python_as_its_class(conn: psycopg.Connection[Any],
                                                sqlstate: str) -> None:
    cls = DatabaseError.registry()[sqlstate]
    call: Call[None] = Call("select jobs.raise_error(%s, %s, %s, %s)",
                            (cls.name, "it went wrong", "what was found", "what to do"),
                            lambda rows: None)
    with pytest.raises(cls) as raised:
        sqljobs.Client(conn).run(call)
    error = raised.value
    assert error.sqlstate == sqlstate
    assert error.message == f"sqljobs.{cls.name}: it went wrong"
    assert error.detail == "what was found"
    assert error.hint == "what to do"
    assert isinstance(error.__cause__, psycopg.Error)


def test_claim_without_queues_raises_queues_required(conn: psycopg.Connection[Any]) -> None:
    call: Call[None] = Call("select jobs.claim('{}', 'w')", (), lambda rows: None)
    with pytest.raises(sqljobs.QueuesRequired) as raised:
        sqljobs.Client(conn).run(call)
    assert raised.value.message.startswith("sqljobs.queues_required:")
    assert raised.value.detail is None
    assert raised.value.hint == "pass the queues this worker serves"


def test_lease_lost_carries_detail_and_hint(conn: psycopg.Connection[Any]) -> None:
    client = sqljobs.Client(conn)
    with pytest.raises(sqljobs.LeaseLost) as raised:
        client.run(queries.ack(987654321, 1))
    assert raised.value.detail == "the job no longer exists"
    assert raised.value.hint is not None and "must stop" in raised.value.hint


def test_other_errors_stay_psycopg_errors(conn: psycopg.Connection[Any]) -> None:
    call: Call[None] = Call("select 1 / 0", (), lambda rows: None)
    with pytest.raises(psycopg.errors.DivisionByZero):
        sqljobs.Client(conn).run(call)
