"""Data subjects (GDPR articles 15 and 17): find, export and erase one person's data.

Declarations (on the app):

- `app.subject_of(job, "customer.id")`: which payload path of a job type names its
  subject. A job type whose model marks `PersonalData` fields and has no such mapping is
  a coverage gap: `app.subject_coverage()` lists it, `sqljobs subjects check` exits 6,
  `sqljobs.testing.assert_subject_coverage(app)` fails a test.
- `app.subject_table("public.customers", subject="id", columns=[...])`: an app table
  whose `columns` hold the subject's data, found by `subject` (erase: set to NULL, or
  `erase="delete"` deletes the rows).

`subject_export(subject)`: the subject's jobs (those whose payload names it at the mapped
path) with the values at their `PersonalData` paths, every place those values (and the
subject itself) occur in the job tables (payloads, results, progress, errors, attempts,
keys, steps, events, event waits, the outbox, schedules, webhook attempts), and the rows
of the mapped tables.

`subject_erase(subject)`: in ONE transaction on the schema owner's connection, every one
of those values is replaced by "[erased]" wherever it occurs in those tables (a key that
holds one becomes `erased:<job id>`), the mapped tables' columns are set to NULL (or
their rows deleted), and one audit row is written (`jobs.subject_audit`: who, when, a
sha256 of the subject, counts and paths, never a value). The values are then gone from
every row, not hidden by a view; `vacuum=True` also vacuums the rewritten tables so their
old row versions go from the heap (WAL and backups keep them until they expire).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from sqljobs._app.maintenance import qualified
from sqljobs._client.errors import ConfigurationError, UnknownJob
from sqljobs._client.redaction import MIN_TEXT_VALUE, Redaction, path_steps
from sqljobs._declare.jobs import JobHandle

ERASED = "[erased]"

# (table, column, kind, row identity) of every place in schema jobs a job's data is
# copied to; "json" columns are searched inside, "text" columns as text.
PLACES: tuple[tuple[str, str, str], ...] = (
    ("job", "payload", "json"), ("job", "result", "json"), ("job", "progress", "json"),
    ("job", "last_error", "json"), ("job", "attempts", "json"), ("job", "key", "key"),
    ("step", "value", "json"), ("event", "payload", "json"),
    ("event_wait", "specs", "json"), ("outbox", "spec", "json"),
    ("schedule", "payload", "json"), ("webhook_attempt", "excerpt", "text"),
)


_JOBS_OF = ("select id, name, tenant, state::text as state, payload from jobs.job "
            "where name = %s and payload #>> %s = %s order by id")
_JOBS_OF_LOCKED = _JOBS_OF + " for update"


class Host(Protocol):
    @property
    def dsn(self) -> str: ...

    @property
    def jobs(self) -> dict[str, JobHandle[Any]]: ...


@dataclass(frozen=True)
class SubjectTable:
    """An app table holding a subject's data: rows where `subject` = the subject."""

    table: str
    subject: str
    columns: tuple[str, ...]
    erase: Literal["null", "delete"] = "null"

    def __post_init__(self) -> None:
        qualified(self.table)
        if not self.columns and self.erase == "null":
            raise ConfigurationError(f"subject table {self.table}: name its personal columns")
        if self.erase not in ("null", "delete"):
            raise ConfigurationError(f"subject table {self.table}: erase is null or delete")
        if self.subject in self.columns and self.erase == "null":
            raise ConfigurationError(
                f"subject table {self.table}: the subject column cannot be set to null "
                "(use erase='delete')")


def _subject_path(path: str) -> list[str]:
    steps = path_steps(path)
    if not steps or any(s in ("[]", "*") for s in steps):
        raise ConfigurationError(f"subject path {path!r} must name one value (keys only)")
    return steps


class Subjects:
    """The subject declarations of an app, and what they do."""

    def __init__(self, app: Host) -> None:
        self.app = app
        self.paths: dict[str, list[str]] = {}
        self.tables: list[SubjectTable] = []

    # -- declarations -------------------------------------------------------------------

    def map_job(self, job: str | JobHandle[Any], path: str) -> None:
        name = job if isinstance(job, str) else job.name
        self.paths[name] = _subject_path(path)

    def add_table(self, table: SubjectTable) -> None:
        if any(t.table == table.table for t in self.tables):
            raise ConfigurationError(f"subject table {table.table} is declared twice")
        self.tables.append(table)

    def _personal(self, name: str) -> tuple[str, ...]:
        return self.app.jobs[name].definition.redaction.personal

    def coverage(self) -> list[str]:
        """Declared job types with PersonalData paths and no subject mapping."""
        return sorted(n for n in self.app.jobs if self._personal(n) and n not in self.paths)

    def check(self) -> None:
        unknown = sorted(set(self.paths) - set(self.app.jobs))
        if unknown:
            raise UnknownJob(f"subject mappings name undeclared jobs: {', '.join(unknown)}")

    # -- finding ------------------------------------------------------------------------

    def _jobs_of(self, conn: psycopg.Connection[Any], subject: str,
                 lock: bool) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for name, steps in sorted(self.paths.items()):
            query = (_JOBS_OF_LOCKED if lock else _JOBS_OF)
            rows = conn.execute(query, (name, steps, subject)).fetchall()
            found.extend(rows)
        return found

    def _values(self, jobs: list[dict[str, Any]], subject: str) -> list[str]:
        """The subject and every value at a personal path of its jobs, longest first."""
        values = {subject}
        for job in jobs:
            paths = self._personal(job["name"]) if job["name"] in self.app.jobs else ()
            values.update(Redaction(sensitive=paths).secrets_of(job["payload"]))
        return sorted((v for v in values if len(v) >= MIN_TEXT_VALUE), key=len, reverse=True)

    @staticmethod
    def _places(conn: psycopg.Connection[Any], values: Sequence[str], lock: bool
                ) -> Iterator[tuple[str, str, str, list[dict[str, Any]]]]:
        """Per place, the rows where any of the values occurs (their ctid and value)."""
        patterns = [_like(json.dumps(v)[1:-1]) for v in values]
        plain = [_like(v) for v in values]
        for table, column, kind in PLACES:
            query = sql.SQL(
                "select ctid::text as ctid, {column} as value{id} from {table} "
                "where {column}::text like any(%s){lock}").format(
                column=sql.Identifier(column), table=sql.Identifier("jobs", table),
                id=sql.SQL(", id") if table == "job" else sql.SQL(""),
                lock=sql.SQL(" for update") if lock else sql.SQL(""))
            rows = conn.execute(query, (plain if kind != "json" else patterns,)).fetchall()
            yield table, column, kind, rows

    # -- export -------------------------------------------------------------------------

    def export(self, subject: str) -> dict[str, Any]:
        self.check()
        with psycopg.connect(self.app.dsn, row_factory=dict_row) as conn, conn.transaction():
            conn.execute("set transaction isolation level repeatable read, read only")
            jobs = self._jobs_of(conn, subject, lock=False)
            values = self._values(jobs, subject)
            exported_jobs = []
            for job in jobs:
                paths = self._personal(job["name"])
                exported_jobs.append({
                    "job_id": job["id"], "name": job["name"], "tenant": job["tenant"],
                    "state": job["state"],
                    "personal": {p: list(_leaves(job["payload"], p)) for p in paths}})
            places = {f"jobs.{t}.{c}": len(rows)
                      for t, c, _, rows in self._places(conn, values, lock=False) if rows}
            tables = {}
            for t in self.tables:
                columns = t.columns or (t.subject,)
                query = sql.SQL("select {columns} from {table} where {subject} = %s").format(
                    columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
                    table=qualified(t.table), subject=sql.Identifier(t.subject))
                tables[t.table] = json.loads(json.dumps(
                    conn.execute(query, (subject,)).fetchall(), default=str))
        return {"subject": subject, "jobs": exported_jobs, "values": values,
                "occurrences": places, "tables": tables}

    # -- erase --------------------------------------------------------------------------

    def erase(self, subject: str, *, actor: str | None = None,
              vacuum: bool = False) -> dict[str, Any]:
        self.check()
        touched: set[str] = set()
        with psycopg.connect(self.app.dsn, row_factory=dict_row) as conn:
            with conn.transaction():
                jobs = self._jobs_of(conn, subject, lock=True)
                values = self._values(jobs, subject)
                per_type: dict[str, dict[str, Any]] = {}
                for job in jobs:
                    entry = per_type.setdefault(job["name"], {
                        "jobs": 0, "paths": sorted(self._personal(job["name"]))})
                    entry["jobs"] += 1
                for job in jobs:  # every personal path, whatever its value's length
                    paths = self._personal(job["name"])
                    payload = job["payload"]
                    for path in paths:
                        payload = _erase_at(payload, path_steps(path))
                    if payload != job["payload"]:
                        conn.execute("update jobs.job set payload = %s where id = %s",
                                     (Jsonb(payload), job["id"]))
                rows_changed: dict[str, int] = {}
                for table, column, kind, rows in self._places(conn, values, lock=True):
                    changed = 0
                    for row in rows:
                        new = _erase_value(row, kind, values)
                        if new is _SAME:
                            continue
                        conn.execute(sql.SQL("update {table} set {column} = %s "
                                             "where ctid = %s::tid").format(
                            table=sql.Identifier("jobs", table),
                            column=sql.Identifier(column)),
                            (Jsonb(new) if kind == "json" else new, row["ctid"]))
                        changed += 1
                    if changed:
                        rows_changed[f"jobs.{table}.{column}"] = changed
                        touched.add(f"jobs.{table}")
                tables: dict[str, int] = {}
                for t in self.tables:
                    if t.erase == "delete":
                        statement = sql.SQL("delete from {table} where {subject} = %s")
                    else:
                        statement = sql.SQL("update {table} set {sets} where {subject} = %s")
                    done = conn.execute(statement.format(
                        table=qualified(t.table), subject=sql.Identifier(t.subject),
                        sets=sql.SQL(", ").join(sql.SQL("{} = null").format(sql.Identifier(c))
                                                for c in t.columns)), (subject,)).rowcount
                    if done:
                        tables[t.table] = done
                        touched.add(t.table)
                erased = {"jobs": per_type, "rows": rows_changed,
                          "tables": {t.table: {"rows": tables[t.table],
                                               "columns": list(t.columns), "erase": t.erase}
                                     for t in self.tables if t.table in tables},
                          "values": len(values)}
                audit = conn.execute(
                    "insert into jobs.subject_audit (action, subject_hash, actor, "
                    "session_role, at, erased) values ('erase', %s, %s, session_user, "
                    "jobs.now(), %s) returning id",
                    (subject_hash(subject), actor or _who(), Jsonb(erased))).fetchone()
                assert audit is not None
            if vacuum and touched:
                conn.autocommit = True
                for table in sorted(touched):
                    conn.execute(sql.SQL("vacuum {}").format(qualified(table)))
        return {"audit_id": audit["id"], **erased}


def subject_hash(subject: str) -> str:
    """What the audit keeps of the subject: its sha256, hex (look a subject up by it)."""
    return hashlib.sha256(subject.encode()).hexdigest()


def _who() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _leaves(payload: Any, path: str) -> Iterator[Any]:
    from sqljobs._client.redaction import _leaves_at

    yield from _leaves_at(payload, path_steps(path))


_SAME = object()


def _erase_at(value: Any, steps: Sequence[str]) -> Any:
    if not steps:
        return value if value is None else ERASED
    head, rest = steps[0], steps[1:]
    if head == "[]":
        return [_erase_at(v, rest) for v in value] if isinstance(value, list) else value
    if not isinstance(value, Mapping):
        return value
    if head == "*":
        return {k: _erase_at(v, rest) for k, v in value.items()}
    if head not in value:
        return value
    return {**value, head: _erase_at(value[head], rest)}


def _replace(value: Any, values: Sequence[str]) -> Any:
    if isinstance(value, str):
        for v in values:
            if v in value:
                value = value.replace(v, ERASED)
        return value
    if isinstance(value, Mapping):
        return {_replace(str(k), values): _replace(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, values) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and str(value) in values:
        return ERASED
    return value


def _erase_value(row: Mapping[str, Any], kind: str, values: Sequence[str]) -> Any:
    value = row["value"]
    if kind == "key":
        return f"erased:{row['id']}" if any(v in value for v in values) else _SAME
    new = _replace(value, values)
    return _SAME if new == value else new


__all__ = ["ERASED", "SubjectTable", "Subjects", "subject_hash"]
