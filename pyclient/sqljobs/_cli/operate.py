"""`sqljobs jobs ...` and `sqljobs queues ...`: what an operator does to jobs and queues.

Each command is one or a few calls of the SQL verbs (sql/90_operator.sql); refusals
arrive as the coded errors and are printed as such, exit code 1. Listings print through
sqljobs._cli.output (a table, tab-separated text when piped, or `--json`). A verb given a
filter instead of ids says how many jobs it would touch and asks first; `--yes` skips
the question, and without a terminal to ask on it refuses (exit code 3).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import psycopg
import typer
from rich.progress import Progress

from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, connected_client, dsn_of, err_console, whole
from sqljobs._cli.limits import use_table
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client
from sqljobs._client.queries import Call
from sqljobs._client.records import BulkMoved, JobRecord, JobState

jobs_app = typer.Typer(help="List, inspect, retry, cancel, promote and remove jobs.",
                       no_args_is_help=True)
queues_app = typer.Typer(help="List queues with their counts; pause and resume them.",
                         no_args_is_help=True)

StateOption = Annotated[list[str] | None, typer.Option(
    "--state", help="Only jobs in this state (repeat for several).")]
QueueOption = Annotated[str | None, typer.Option(help="Only jobs of this queue.")]
NameOption = Annotated[str | None, typer.Option(help="Only jobs of this job name.")]
TenantOption = Annotated[str | None, typer.Option(help="Only jobs of this tenant.")]
JOB_ID = whole(1, what="a job id")  # a bigint, as jobs.job.id
IdsArgument = Annotated[list[int] | None, typer.Argument(help="Job ids; or give a filter.",
                                                         **JOB_ID)]


def _short(value: Any, limit: int = 60) -> str:
    """An error's message on one line (cut to the width only on a terminal)."""
    if value is None:
        return ""
    text = value.get("message", "") if isinstance(value, dict) else json.dumps(value)
    return output.one_line(str(text), limit)


def _actor(actor: Any) -> str:
    """Who asked for a job, on one line: a string as is, an object as compact JSON."""
    if actor is None:
        return ""
    text = actor if isinstance(actor, str) else json.dumps(actor, separators=(",", ":"))
    return output.one_line(text, 40)


def _when(record: JobRecord) -> str:
    moment = record.finished_at or record.run_at
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "never (waits)"


AfterOption = Annotated[int | None, typer.Option(
    "--after-id", help="Keyset cursor: jobs older than this id (the `next` a page printed).",
    **JOB_ID)]
TimeOption = Annotated[str | None, typer.Option(help="An ISO 8601 timestamp.", show_default=False)]


@jobs_app.command("list")
def jobs_list(state: StateOption = None, queue: QueueOption = None, name: NameOption = None,
              tenant: TenantOption = None,
              key: Annotated[str | None, typer.Option(help="Only the job of this key.")] = None,
              created_after: TimeOption = None, created_before: TimeOption = None,
              finished_after: TimeOption = None, finished_before: TimeOption = None,
              after_id: AfterOption = None,
              limit: Annotated[int, typer.Option(help="Page size (1..1000), newest first.",
                                                 **whole())] = 50,
              as_json: JsonOption = False,
              dsn: DsnOption = None) -> None:
    """List jobs, newest first, a page at a time; every value redacted (jobs.list_jobs).

    A full page ends with the cursor of the next one: `--after-id N`. With --json:
    {"jobs": [...], "next_after_id": N or null}, payloads included (redacted)."""
    unknown = sorted(set(state or ()) - {s.value for s in JobState})
    if unknown:
        err_console.print(f"[red]error:[/red] unknown state {', '.join(unknown)}; states: "
                          + ", ".join(s.value for s in JobState))
        raise typer.Exit(2)
    given = {"state": state or None, "queue": queue, "name": name, "tenant": tenant, "key": key,
             "created_after": created_after, "created_before": created_before,
             "finished_after": finished_after, "finished_before": finished_before}
    with connected_client(dsn) as client:
        records = client.run(introspection.list_jobs(
            {k: v for k, v in given.items() if v is not None}, after_id, limit))
    cursor = records[-1].id if len(records) == limit else None
    if as_json:
        output.emit_json({"jobs": [r.model_dump(mode="json") for r in records],
                          "next_after_id": cursor})
        return
    table = Listing("id", "name", "queue", "state", "attempt", "run at / finished",
                    "actor", "last error")
    for r in records:
        table.add_row(r.id, r.name, r.queue, r.state.value, f"{r.attempt}/{r.max_attempts}",
                      _when(r), _actor(r.actor), _short(r.last_error))
    output.show(table)
    if cursor is not None:
        output.say(f"next page: --after-id {cursor}")


def _cell(value: Any) -> str:
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else str(value)


@jobs_app.command("show")
def jobs_show(job_id: Annotated[int, typer.Argument(help="The job id.", **JOB_ID)],
              payload: Annotated[bool, typer.Option(
                  help="Print the payload (redacted).")] = True,
              as_json: JsonOption = False,
              dsn: DsnOption = None) -> None:
    """Show one job, redacted: fields, payload, every attempt with its outcome, error
    (as a traceback) and timings, result, steps, children and open event waits
    (jobs.job_detail). With --json: jobs.job_detail's document. An unknown id exits with
    code 4."""
    with connected_client(dsn) as client:
        detail = client.run(introspection.job_detail(job_id))
    if detail is None:
        err_console.print(f"[red]error:[/red] no job has id {job_id}")
        raise typer.Exit(output.NOT_FOUND)
    if as_json:
        output.emit_json(detail)
        return
    job = dict(detail["job"])
    body = job.pop("payload", None)
    error = job.pop("last_error", None)
    fields = Listing("field", "value", header=False)
    for key, value in job.items():
        if value is not None:
            fields.add_row(key, _cell(value))
    if payload:
        fields.add_row("payload", _cell(body))
    # every attempt (the history of those that did not succeed, then the current run),
    # each error's message on its line; tracebacks print below as their own lines
    attempt = Listing("attempt", "outcome", "worker", "started", "ended", "error kind",
                      "error", title="attempts")
    for run in introspection.attempts_of(detail):
        attempt.add_row(f"{run.attempt}/{job['max_attempts']}", run.outcome, run.worker,
                        run.started_at.isoformat() if run.started_at else None,
                        run.ended_at.isoformat() if run.ended_at else None,
                        run.error.get("kind", "") if isinstance(run.error, dict) else "",
                        _short(run.error, 120))
    if not attempt.rows and error is not None:  # an error of no attempt (never claimed)
        attempt.add_row(f"{job['attempt']}/{job['max_attempts']}", job["state"], None, None,
                        None, error.get("kind", "") if isinstance(error, dict) else "",
                        _short(error, 120))
    tracebacks: dict[str, output.Block] = {}  # by text: one block for the same traceback

    def lifted(value: Any, where: str) -> Any:
        """`value` with every traceback in it printed below as its lines, not in a cell."""
        if isinstance(value, dict):
            trace = value.get("traceback")
            if isinstance(trace, str) and "\n" in trace:
                tracebacks.setdefault(trace, output.Block(f"traceback of {where}", trace))
                value = {**value, "traceback": "(printed below)"}
            return {key: lifted(item, where) for key, item in value.items()}
        if isinstance(value, list):
            return [lifted(item, where) for item in value]
        return value

    if error is not None:
        kind = error.get("kind") if isinstance(error, dict) else None
        lifted(error, f"the last error ({kind or 'error'}: {_short(error, 200)})")
    steps = children = waits = None
    if detail["steps"]:
        steps = Listing("#", "step", "kind", "value", "at", title="steps")
        for step in detail["steps"]:
            value = lifted(step["value"], f"step {step['ordinal']} ({step['name']})")
            steps.add_row(step["ordinal"], step["name"], step["kind"],
                          output.one_line(json.dumps(value), 80), step["created_at"])
    if detail["children"]:
        children = Listing("id", "name", "state", "step", "attempt", "finished",
                           title="children")
        for child in detail["children"]:
            children.add_row(child["id"], child["name"], child["state"], child["parent_step"],
                             child["attempt"], child["finished_at"])
    if detail["waits"]:
        waits = Listing("step", "events", "deadline", "since", title="waiting for events")
        for wait in detail["waits"]:
            waits.add_row(wait["step"], ", ".join(wait["events"]), wait["deadline"],
                          wait["created_at"])
    output.show(fields, attempt, steps, children, waits, *tracebacks.values())


def _filter(state: list[str] | None, queue: str | None, name: str | None,
            tenant: str | None) -> dict[str, Any]:
    given = {"state": state or None, "queue": queue, "name": name, "tenant": tenant}
    return {key: value for key, value in given.items() if value is not None}


def _would_touch(dsn: str, filter: Mapping[str, Any],
                 bulk: Callable[[Mapping[str, Any], int], Call[BulkMoved]]) -> int:
    """How many jobs the verb would move now: one call moving at most one job, rolled
    back. moved + remaining is the verb's own count (its states, its filter), not a
    copy of its rules here."""
    with psycopg.connect(dsn) as conn:  # not autocommit: the transaction is rolled back
        step = Client(conn).run(bulk(filter, 1))
        conn.rollback()
    return step.moved + step.remaining


def _report(verb: str, matched: int, changed: int, as_json: bool) -> None:
    if as_json:
        output.emit_json({"matched": matched, "changed": changed})
    elif matched > changed:
        output.say(f"{verb}: {changed} job(s); {matched - changed} still match "
                   f"(locked by a worker, or moved since)")
    else:
        output.say(f"{verb}: {changed} job(s)")


def _confirm(verb: str, matched: int, filter: Mapping[str, Any], as_json: bool) -> None:
    """Go on only when asked and answered yes on a terminal; else exit code 3."""
    described = json.dumps(dict(filter), sort_keys=True)
    if not sys.stdin.isatty():
        if as_json:
            output.emit_json({"matched": matched, "changed": 0})
        err_console.print(f"{verb} would touch {matched} job(s) matching {described}; "
                          "nothing done: pass --yes to do it", soft_wrap=True,
                          highlight=False, markup=False)
        raise typer.Exit(output.NOT_CONFIRMED)
    # Asked on stderr and read from stdin by hand: click's confirm(err=True) writes a
    # space to stdout, which would spoil a --json document.
    sys.stderr.write(f"{verb} {matched} job(s) matching {described}? [y/N]: ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise typer.Exit(output.NOT_CONFIRMED)


def _apply(verb: str, ids: list[int] | None, filter: Mapping[str, Any], max_per_call: int,
           one: Callable[[list[int]], list[Call[None]]],
           bulk: Callable[[Mapping[str, Any], int], Call[BulkMoved]], dsn: str | None,
           yes: bool, as_json: bool) -> None:
    """Run a verb on the ids given, or on every job matching the filter, in bounded calls.

    A filter is counted first and, without --yes, confirmed (see _confirm)."""
    if ids and filter:
        err_console.print("[red]error:[/red] give job ids or a filter, not both")
        raise typer.Exit(output.USAGE)
    if not ids and not filter:
        err_console.print(f"[red]error:[/red] give job ids, or a filter (--state, --queue, "
                          f"--name, --tenant) to {verb} every job it matches")
        raise typer.Exit(output.USAGE)
    resolved = dsn_of(dsn)
    with connected_client(resolved) as client:
        if ids:
            client.run_all(one(ids))
            _report(verb, len(ids), len(ids), as_json)
            return
        if not yes:
            matched = _would_touch(resolved, filter, bulk)
            if matched == 0:
                _report(verb, 0, 0, as_json)
                return
            _confirm(verb, matched, filter, as_json)
        moved_total = 0
        with Progress(console=err_console, transient=True) as progress:
            task = progress.add_task(verb, total=None)
            while True:
                step = client.run(bulk(filter, max_per_call))
                moved_total += step.moved
                progress.update(task, completed=moved_total,
                                total=moved_total + step.remaining)
                if step.remaining == 0 or step.moved == 0:
                    break
    _report(verb, moved_total + step.remaining, moved_total, as_json)


MaxOption = Annotated[int, typer.Option("--max", help="Rows moved per call (1..10000).",
                                        **whole())]
YesOption = Annotated[bool, typer.Option(
    "--yes", "-y", help="With a filter: act without asking (else it asks how many, and "
                        "exits 3 when stdin is not a terminal).")]
VerbJsonOption = Annotated[bool, typer.Option(
    "--json", help='Print {"matched": N, "changed": N}.')]


@jobs_app.command("retry")
def jobs_retry(ids: IdsArgument = None, state: StateOption = None, queue: QueueOption = None,
               name: NameOption = None, tenant: TenantOption = None, max: MaxOption = 1000,
               yes: YesOption = False, as_json: VerbJsonOption = False,
               dsn: DsnOption = None) -> None:
    """Run failed, dead or cancelled jobs again (attempts start over)."""
    _apply("retry", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.requeue(ids)], queries.requeue_where, dsn, yes, as_json)


@jobs_app.command("fork")
def jobs_fork(job_id: Annotated[int, typer.Argument(help="The job to fork.", **JOB_ID)],
              from_step: Annotated[str, typer.Option(
                  "--from-step", help="The stored step to run again from.")],
              as_json: Annotated[bool, typer.Option(
                  "--json", help='Print {"job_id": N, "forked_from": N, "from_step": "..."}.')]
              = False,
              dsn: DsnOption = None) -> None:
    """Run a job again from one of its durable steps: a new job replays the steps stored
    before FROM_STEP and runs it and every step after it (jobs.fork). The original is
    left as it was; a running one is refused."""
    with connected_client(dsn_of(dsn)) as client:
        new_id = client.run(queries.fork(job_id, from_step))
    if as_json:
        output.emit_json({"job_id": new_id, "forked_from": job_id, "from_step": from_step})
    else:
        output.say(f"forked job {job_id} from step {from_step!r}: new job {new_id}")


@jobs_app.command("cancel")
def jobs_cancel(ids: IdsArgument = None, state: StateOption = None, queue: QueueOption = None,
                name: NameOption = None, tenant: TenantOption = None, max: MaxOption = 1000,
                yes: YesOption = False, as_json: VerbJsonOption = False,
                dsn: DsnOption = None) -> None:
    """Cancel live jobs (a running one's worker hears it at once and stops the run)."""
    _apply("cancel", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.cancel(i) for i in ids], queries.cancel_where, dsn, yes,
           as_json)


@jobs_app.command("promote")
def jobs_promote(ids: IdsArgument = None, state: StateOption = None,
                 queue: QueueOption = None, name: NameOption = None,
                 tenant: TenantOption = None, max: MaxOption = 1000,
                 yes: YesOption = False, as_json: VerbJsonOption = False,
                 dsn: DsnOption = None) -> None:
    """Run waiting jobs now (delayed or parked ones)."""
    _apply("promote", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.promote(i) for i in ids], queries.promote_where, dsn, yes,
           as_json)


@jobs_app.command("remove")
def jobs_remove(ids: IdsArgument = None, state: StateOption = None, queue: QueueOption = None,
                name: NameOption = None, tenant: TenantOption = None, max: MaxOption = 1000,
                yes: YesOption = False, as_json: VerbJsonOption = False,
                dsn: DsnOption = None) -> None:
    """Delete jobs that no worker is running."""
    _apply("remove", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.remove(i) for i in ids], queries.remove_where, dsn, yes,
           as_json)


@queues_app.command("list")
def queues_list(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Every queue: paused or not, counts by state, oldest runnable age, jobs no live
    worker can run (unserved) and jobs a limit holds back (limited); then each limit
    group in use, so "held by a limit" and "no worker" tell apart. With --json:
    {"queues": [...], "limits_in_use": [...]}."""
    with connected_client(dsn) as client:
        stats = client.run(queries.queue_stats())
        use = client.run(queries.limit_stats())
    if as_json:
        output.emit_json({"queues": [q.model_dump(mode="json") for q in stats],
                          "limits_in_use": [u.model_dump(mode="json") for u in use]})
        return
    table = Listing("queue", "paused", "ready", "running", "parked", "interrupted",
                    "succeeded", "failed", "dead", "cancelled", "oldest ready (s)", "unserved",
                    "limited")
    for q in stats:
        table.add_row(q.queue, "yes" if q.paused else "", q.ready, q.running, q.parked,
                      q.interrupted, q.succeeded, q.failed, q.dead, q.cancelled,
                      f"{q.oldest_ready_s:.1f}", q.unserved, q.limited)
    output.show(table, use_table(use) if use else None)


@queues_app.command("pause")
def queues_pause(queue: Annotated[str, typer.Argument(help="The queue.")],
                 dsn: DsnOption = None) -> None:
    """Stop workers from claiming this queue's jobs (enqueue still works)."""
    with connected_client(dsn) as client:
        client.run(queries.pause_queue(queue))
    output.say(f"paused {queue}")


@queues_app.command("resume")
def queues_resume(queue: Annotated[str, typer.Argument(help="The queue.")],
                  dsn: DsnOption = None) -> None:
    """Let workers claim this queue's jobs again."""
    with connected_client(dsn) as client:
        client.run(queries.resume_queue(queue))
    output.say(f"resumed {queue}")


def workers(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """List live workers, and waiting jobs no live worker can run. With --json:
    {"workers": [...], "unserved": [...]}."""
    with connected_client(dsn) as client:
        live = client.run(queries.workers())
        unserved = client.run(queries.unserved_jobs())
    if as_json:
        output.emit_json({"workers": [w.model_dump(mode="json") for w in live],
                          "unserved": [u.model_dump(mode="json") for u in unserved]})
        return
    table = Listing("id", "host", "pid", "queues", "jobs", "concurrency", "running",
                    "started", "last heartbeat", title=f"{len(live)} live worker(s)")
    for w in live:
        table.add_row(w.id, w.host, w.pid, ", ".join(w.queues), len(w.names), w.concurrency,
                      w.running, w.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                      w.heartbeat_at.strftime("%H:%M:%S"))
    missing = None
    if unserved:
        missing = Listing("queue", "name", "waiting", "oldest (s)",
                          title="waiting jobs no live worker can run")
        for u in unserved:
            missing.add_row(u.queue, u.name, u.waiting, f"{u.oldest_s:.0f}")
    output.show(table, missing)
