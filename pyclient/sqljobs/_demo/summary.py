"""What the demo tells at the end: per job kind, the outcome it reached, its attempts
and the notable events read back from the database (retries, dead letters, sleeps,
events, compensations, child jobs), whether that is what the demo expected, and the
commands that show the same rows.

Everything here is computed from rows (`jobs.job_view`, `jobs.job_steps`), not from what
the handlers said while running: the summary is what the database holds.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqljobs._client.records import StepRecord
from sqljobs._demo.jobs import HEARTBEAT, HEARTBEAT_CRON, WIDTHS
from sqljobs._dev import embedded

FINAL_STATES = frozenset({"succeeded", "failed", "dead", "cancelled"})

# (kind, what the demo expects of it), in the order the summary tells them.
KINDS: tuple[tuple[str, str], ...] = (
    ("demo.send_welcome", "all succeed; the flaky one on attempt 2"),
    ("demo.sync_crm", "dead-lettered after 3 attempts"),
    ("demo.fulfil_order", "one ships; the other fails and is compensated"),
    (HEARTBEAT, "fires every 2 s, at least twice; every run succeeds"),
    ("demo.make_thumbnails", f"{len(WIDTHS)} child jobs succeed, then the parent"),
)


@dataclass(frozen=True)
class JobRow:
    """One demo job, as `jobs.job_view` shows it."""

    id: int
    name: str
    queue: str
    key: str
    state: str
    attempt: int
    max_attempts: int
    last_error: Any
    result: Any
    run_at: datetime | None
    created_at: datetime

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


@dataclass
class Report:
    """Everything the summary is made of."""

    run_id: str
    dsn: str
    embedded: bool
    first_id: int
    elapsed_s: float
    finished: bool  # every demo job reached a final state before the time limit
    rows: list[JobRow]
    interrupted: bool = False  # stopped by a signal (Ctrl-C) before that
    steps: dict[int, list[StepRecord]] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # job id -> what it is about
    flaky: set[int] = field(default_factory=set)  # the mails that fail their first attempt


@dataclass
class KindSummary:
    name: str
    expected: str
    ok: bool
    headline: str
    details: list[str]


def _error(error: Any) -> str:
    if not isinstance(error, Mapping):
        return "no error recorded"
    kind = str(error.get("type") or error.get("kind") or "error").rpartition(".")[2]
    return f"{kind}: {error.get('message', '')}".strip()


def _counts(rows: Sequence[JobRow]) -> str:
    by_state: dict[str, int] = {}
    for row in rows:
        by_state[row.state] = by_state.get(row.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _step_story(steps: Sequence[StepRecord]) -> list[str]:
    """What the stored steps of a saga say happened, in order."""
    words = {"reserve-stock": "stock reserved", "charge-card": "card charged",
             "ship": "shipped"}
    story: list[str] = []
    undone = [s.name.partition(":")[2] for s in steps if s.kind == "undo"]
    for step in steps:
        value = step.value if isinstance(step.value, Mapping) else {}
        if step.kind == "sleep" and "until" in value:
            slept = (datetime.fromisoformat(value["until"]) - step.created_at).total_seconds()
            story.append(f"slept {slept:.0f} s (parked)")
        elif step.kind == "event":
            story.append(f"event {value.get('event')} received (event id {value.get('id')})")
        elif step.kind == "timeout":
            story.append(f"no event before the timeout ({step.name})")
        elif step.kind == "unwind":
            story.append(f"failed for good ({_error(value.get('error'))})")
        elif step.kind == "undo" and step.name.endswith(f":{undone[0]}"):
            story.append(f"compensations ran: {', then '.join(undone)} undone")
        elif step.kind == "run":
            story.append(words.get(step.name, step.name))
    return story


def _welcome(report: Report, rows: list[JobRow]) -> KindSummary:
    details = []
    ok = bool(rows) and all(r.state == "succeeded" for r in rows)
    for row in rows:
        label = report.labels.get(row.id, "")
        if row.id in report.flaky:
            ok = ok and row.attempt == 2
            then = (f"retried after 0.5 s, {row.state} on attempt {row.attempt}"
                    if row.state == "succeeded" else f"now {row.state}")
            details.append(f"job {row.id} {label}: attempt 1 failed "
                           f"({_error(row.last_error)}), {then}")
        else:
            details.append(f"job {row.id} {label}: {row.state} on attempt {row.attempt}")
    attempts = sum(r.attempt for r in rows)
    return KindSummary("demo.send_welcome", KINDS[0][1], ok,
                       f"{_jobs(len(rows))}: {_counts(rows)}; {attempts} attempts in all", details)


def _crm(report: Report, rows: list[JobRow]) -> KindSummary:
    ok = bool(rows) and all(r.state == "dead" and r.attempt == r.max_attempts for r in rows)
    details = [f"job {r.id} {report.labels.get(r.id, '')}: failed {r.attempt} attempts of "
               f"{r.max_attempts} (backoff 0.2 s, 0.4 s), then {r.state}: "
               f"{_error(r.last_error)}" for r in rows]
    return KindSummary("demo.sync_crm", KINDS[1][1], ok,
                       f"{_jobs(len(rows))}: {_counts(rows)}; dead-lettered jobs wait for "
                       f"jobs.requeue", details)


def _orders(report: Report, rows: list[JobRow]) -> KindSummary:
    details = []
    shipped = compensated = 0
    for row in rows:
        steps = report.steps.get(row.id, [])
        kinds = {s.kind for s in steps}
        story = ", ".join(_step_story(steps)) or "no step stored"
        details.append(f"job {row.id} {report.labels.get(row.id, '')}: {story} -> {row.state}")
        if row.state == "succeeded" and {"sleep", "event"} <= kinds:
            shipped += 1
        undone = [s for s in steps if s.kind == "undo"]
        if (row.state == "failed" and isinstance(row.last_error, Mapping)
                and row.last_error.get("compensated") and len(undone) == 2
                and {"sleep", "event"} <= kinds):
            compensated += 1
            details.append(f"    last_error.compensated = true; compensations stored as "
                           f"{', '.join(s.name for s in undone)} (reverse order)")
    ok = len(rows) == 2 and shipped == 1 and compensated == 1
    return KindSummary("demo.fulfil_order", KINDS[2][1], ok,
                       f"{_jobs(len(rows))}: {_counts(rows)}; sleep, event wait and saga",
                       details)


def _heartbeat(report: Report, rows: list[JobRow]) -> KindSummary:
    ok = len(rows) >= 2 and all(r.state == "succeeded" for r in rows)
    fired = ", ".join(r.run_at.strftime("%H:%M:%S") for r in rows if r.run_at is not None)
    details = [f"cron {HEARTBEAT_CRON!r} (seconds first): "
               + (f"fired at {fired} UTC, one job per occurrence (key {HEARTBEAT}@<instant>)"
                  if fired else "no occurrence fired"),
               "the demo pauses the schedule when it ends (sqljobs schedules list shows it)"]
    return KindSummary(HEARTBEAT, KINDS[3][1], ok,
                       f"fired {len(rows)} time{'' if len(rows) == 1 else 's'}: "
                       f"{_counts(rows) or 'no job'}", details)


def _thumbnails(report: Report, rows: list[JobRow], children: list[JobRow]) -> KindSummary:
    ok = bool(rows)
    details = []
    for parent in rows:
        mine = [c for c in children if c.key.startswith(f"{parent.id}:")]
        ok = ok and parent.state == "succeeded" and len(mine) == len(WIDTHS) and all(
            c.state == "succeeded" for c in mine)
        details.append(f"job {parent.id} {report.labels.get(parent.id, '')}: "
                       f"ctx.step.invoke_many enqueued {len(mine)} demo.resize child jobs "
                       f"(ids {', '.join(str(c.id) for c in mine)}): {_counts(mine)}; "
                       f"the parent parked until they settled, then {parent.state}")
    return KindSummary("demo.make_thumbnails", KINDS[4][1], ok,
                       f"{_jobs(len(rows))} + {len(children)} child jobs: "
                       f"{_counts(rows + children)}", details)


def summarize(report: Report) -> list[KindSummary]:
    """One KindSummary per job kind, in KINDS order."""
    by_name: dict[str, list[JobRow]] = {}
    for row in report.rows:
        by_name.setdefault(row.name, []).append(row)
    return [
        _welcome(report, by_name.get("demo.send_welcome", [])),
        _crm(report, by_name.get("demo.sync_crm", [])),
        _orders(report, by_name.get("demo.fulfil_order", [])),
        _heartbeat(report, by_name.get(HEARTBEAT, [])),
        _thumbnails(report, by_name.get("demo.make_thumbnails", []),
                    by_name.get("demo.resize", [])),
    ]


def _psql() -> str:
    """A psql to show in the commands: on PATH, else the embedded wheel's."""
    if shutil.which("psql"):
        return "psql"
    install = embedded.install_dir()
    if install is not None and (install / "bin" / "psql").is_file():
        return shlex.quote(str(install / "bin" / "psql"))
    return "psql"


def inspect_commands(report: Report) -> list[str]:
    """Commands that show what the demo left in the database: the SQL that works
    anywhere, then the `sqljobs` commands that read the same rows."""
    psql = f"{_psql()} {shlex.quote(report.dsn)} -c"
    saga = next((r.id for r in report.rows if r.name == "demo.fulfil_order"
                 and r.state == "failed"), None)
    dsn_flag = "" if report.embedded else f" --dsn {shlex.quote(report.dsn)}"
    commands = [
        f"{psql} \"select id, name, state, attempt, last_error->>'message' as error "
        f"from jobs.job_view where name like 'demo.%' and id >= {report.first_id} order by id\"",
        f"sqljobs jobs list --limit {max(len(report.rows), 1)}{dsn_flag}",
    ]
    if saga is not None:
        commands.append(f"sqljobs jobs show {saga}{dsn_flag}")
    commands += [f"sqljobs queues list{dsn_flag}", f"sqljobs schedules list{dsn_flag}"]
    if report.embedded:
        commands.append("sqljobs dev stop    # stops the embedded PostgreSQL; its data stays")
    return commands


def render(report: Report) -> tuple[list[str], bool]:
    """The summary's lines, and whether every kind did what the demo expected."""
    kinds = summarize(report)
    ok = report.finished and all(k.ok for k in kinds)
    total = len(report.rows)
    made = sum(1 for r in report.rows if r.id not in report.labels)
    # the demo enqueued some; the others are their child jobs and the cron's firings
    origin = (f" ({total - made} the demo enqueued, {made} made by them: child jobs and "
              f"cron firings)" if made else "")
    if report.finished:
        head = (f"sqljobs demo: all {total} jobs of run {report.run_id}{origin} reached a "
                f"final state in {report.elapsed_s:.1f} s")
    else:
        live = sum(1 for r in report.rows if not r.final)
        why = "interrupted" if report.interrupted else "time limit reached"
        head = (f"sqljobs demo: stopped ({why}) after {report.elapsed_s:.1f} s with {live} of "
                f"{total} jobs of run {report.run_id} not final")
    lines = ["", head, ""]
    width = max(len(k.name) for k in kinds)
    for kind in kinds:
        verdict = "ok" if kind.ok else f"UNEXPECTED (expected: {kind.expected})"
        lines.append(f"  {kind.name:<{width}}  {kind.headline}  [{verdict}]")
        lines += [f"  {'':<{width}}    {detail}" for detail in kind.details]
    lines += ["", "The data stays in the database. Look at it:"]
    lines += [f"  {command}" for command in inspect_commands(report)]
    lines.append("")
    lines.append("sqljobs demo: everything happened as expected" if ok
                 else "sqljobs demo: something did not happen as expected (see above)")
    return lines, ok


__all__ = ["FINAL_STATES", "KINDS", "JobRow", "KindSummary", "Report",
           "inspect_commands", "render", "summarize"]
