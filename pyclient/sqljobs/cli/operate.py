"""`sqljobs jobs ...` and `sqljobs queues ...`: what an operator does to jobs and queues.

Each command is one or a few calls of the SQL verbs (sql/90_operator.sql); refusals
arrive as the coded errors and are printed as such, exit code 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import psycopg
import typer
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from sqljobs.cli.common import DsnOption, connected_client, console, dsn_of, err_console
from sqljobs.cli.limits import use_table
from sqljobs.client import introspection, queries
from sqljobs.client.connection import Client
from sqljobs.client.queries import Call
from sqljobs.client.records import BulkMoved, JobRecord, JobState

jobs_app = typer.Typer(help="List, inspect, retry, cancel, promote and remove jobs.",
                       no_args_is_help=True)
queues_app = typer.Typer(help="List queues with their counts; pause and resume them.",
                         no_args_is_help=True)

StateOption = Annotated[list[str] | None, typer.Option(
    "--state", help="Only jobs in this state (repeat for several).")]
QueueOption = Annotated[str | None, typer.Option(help="Only jobs of this queue.")]
NameOption = Annotated[str | None, typer.Option(help="Only jobs of this job name.")]
TenantOption = Annotated[str | None, typer.Option(help="Only jobs of this tenant.")]
IdsArgument = Annotated[list[int] | None, typer.Argument(help="Job ids; or give a filter.")]


def _short(value: Any, limit: int = 60) -> str:
    """A one-line cell; escaped, so that "[redacted]" prints rather than reads as markup."""
    if value is None:
        return ""
    text = value.get("message", "") if isinstance(value, dict) else json.dumps(value)
    text = str(text).replace("\n", " ")
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def _when(record: JobRecord) -> str:
    moment = record.finished_at or record.run_at
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "never (waits)"


AfterOption = Annotated[int | None, typer.Option(
    "--after-id", help="Keyset cursor: jobs older than this id (the `next` a page printed).")]
TimeOption = Annotated[str | None, typer.Option(help="An ISO 8601 timestamp.", show_default=False)]


def _json_line(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


@jobs_app.command("list")
def jobs_list(state: StateOption = None, queue: QueueOption = None, name: NameOption = None,
              tenant: TenantOption = None,
              key: Annotated[str | None, typer.Option(help="Only the job of this key.")] = None,
              created_after: TimeOption = None, created_before: TimeOption = None,
              finished_after: TimeOption = None, finished_before: TimeOption = None,
              after_id: AfterOption = None,
              limit: Annotated[int, typer.Option(help="Page size (1..1000), newest first.")] = 50,
              as_json: Annotated[bool, typer.Option(
                  "--json", help="One JSON object per job (payload included, redacted).")] = False,
              dsn: DsnOption = None) -> None:
    """List jobs, newest first, a page at a time; every value redacted (jobs.list_jobs).

    A full page ends with the cursor of the next one: `--after-id N`."""
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
        for r in records:
            typer.echo(_json_line(r.model_dump(mode="json")))
        if cursor is not None:
            typer.echo(_json_line({"next_after_id": cursor}))
        return
    table = Table("id", "name", "queue", "state", "attempt", "run at / finished", "last error")
    for r in records:
        table.add_row(str(r.id), r.name, r.queue, r.state.value, f"{r.attempt}/{r.max_attempts}",
                      _when(r), _short(r.last_error))
    console.print(table)
    if cursor is not None:
        console.print(f"next page: --after-id {cursor}")


def _cell(value: Any) -> str:
    return escape(json.dumps(value, default=str) if isinstance(value, (dict, list))
                  else str(value))


@jobs_app.command("show")
def jobs_show(job_id: Annotated[int, typer.Argument(help="The job id.")],
              payload: Annotated[bool, typer.Option(
                  help="Print the payload (redacted).")] = True,
              as_json: Annotated[bool, typer.Option(
                  "--json", help="Print jobs.job_detail's JSON.")] = False,
              dsn: DsnOption = None) -> None:
    """Show one job, redacted: fields, payload, the latest attempt with its error and
    timings, result, steps, children and open event waits (jobs.job_detail)."""
    with connected_client(dsn) as client:
        detail = client.run(introspection.job_detail(job_id))
    if detail is None:
        err_console.print(f"[red]error:[/red] no job has id {job_id}")
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps(detail, indent=2, sort_keys=True))
        return
    job = dict(detail["job"])
    body = job.pop("payload", None)
    error = job.pop("last_error", None)
    fields = Table.grid(padding=(0, 2))
    for key, value in job.items():
        if value is not None:
            fields.add_row(f"[bold]{key}[/bold]", _cell(value))
    if payload:
        fields.add_row("[bold]payload[/bold]", _cell(body))
    console.print(fields)
    attempt = Table("attempt", "started", "finished", "error kind", "error", title="attempts")
    attempt.add_row(f"{job['attempt']}/{job['max_attempts']}", str(job.get("started_at") or ""),
                    str(job.get("finished_at") or ""),
                    str((error or {}).get("kind", "")) if isinstance(error, dict) else "",
                    _short(error, 120))
    console.print(attempt)
    if detail["steps"]:
        table = Table("#", "step", "kind", "value", "at", title="steps")
        for step in detail["steps"]:
            table.add_row(str(step["ordinal"]), step["name"], step["kind"],
                          escape(json.dumps(step["value"])[:80]), str(step["created_at"]))
        console.print(table)
    if detail["children"]:
        table = Table("id", "name", "state", "step", "attempt", "finished", title="children")
        for child in detail["children"]:
            table.add_row(str(child["id"]), child["name"], child["state"],
                          child["parent_step"] or "", str(child["attempt"]),
                          str(child["finished_at"] or ""))
        console.print(table)
    if detail["waits"]:
        table = Table("step", "events", "deadline", "since", title="waiting for events")
        for wait in detail["waits"]:
            table.add_row(wait["step"], ", ".join(wait["events"]), str(wait["deadline"]),
                          str(wait["created_at"]))
        console.print(table)


def _filter(state: list[str] | None, queue: str | None, name: str | None,
            tenant: str | None) -> dict[str, Any]:
    given = {"state": state or None, "queue": queue, "name": name, "tenant": tenant}
    return {key: value for key, value in given.items() if value is not None}


def _apply(verb: str, ids: list[int] | None, filter: Mapping[str, Any], max_per_call: int,
           one: Callable[[list[int]], list[Call[None]]],
           bulk: Callable[[Mapping[str, Any], int], Call[BulkMoved]], dsn: str | None) -> None:
    """Run a verb on the ids given, or on every job matching the filter, in bounded calls."""
    if ids and filter:
        err_console.print("[red]error:[/red] give job ids or a filter, not both")
        raise typer.Exit(2)
    if not ids and not filter:
        err_console.print(f"[red]error:[/red] give job ids, or a filter (--state, --queue, "
                          f"--name, --tenant) to {verb} every job it matches")
        raise typer.Exit(2)
    with connected_client(dsn) as client:
        if ids:
            client.run_all(one(ids))
            console.print(f"{verb}: {len(ids)} job(s)")
            return
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
        console.print(f"{verb}: {moved_total} job(s); {step.remaining} still match "
                      f"(locked by a worker, or moved since)" if step.remaining else
                      f"{verb}: {moved_total} job(s)")


MaxOption = Annotated[int, typer.Option("--max", help="Rows moved per call (1..10000).")]


@jobs_app.command("retry")
def jobs_retry(ids: IdsArgument = None, state: StateOption = None, queue: QueueOption = None,
               name: NameOption = None, tenant: TenantOption = None, max: MaxOption = 1000,
               dsn: DsnOption = None) -> None:
    """Run failed, dead or cancelled jobs again (attempts start over)."""
    _apply("retry", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.requeue(ids)], queries.requeue_where, dsn)


@jobs_app.command("cancel")
def jobs_cancel(ids: IdsArgument = None, state: StateOption = None, queue: QueueOption = None,
                name: NameOption = None, tenant: TenantOption = None, max: MaxOption = 1000,
                dsn: DsnOption = None) -> None:
    """Cancel live jobs (a running one stops at its worker's next heartbeat)."""
    _apply("cancel", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.cancel(i) for i in ids], queries.cancel_where, dsn)


@jobs_app.command("promote")
def jobs_promote(ids: IdsArgument = None, state: StateOption = None,
                 queue: QueueOption = None, name: NameOption = None,
                 tenant: TenantOption = None, max: MaxOption = 1000,
                 dsn: DsnOption = None) -> None:
    """Run waiting jobs now (delayed or parked ones)."""
    _apply("promote", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.promote(i) for i in ids], queries.promote_where, dsn)


@jobs_app.command("remove")
def jobs_remove(ids: IdsArgument = None, state: StateOption = None, queue: QueueOption = None,
                name: NameOption = None, tenant: TenantOption = None, max: MaxOption = 1000,
                dsn: DsnOption = None) -> None:
    """Delete jobs that no worker is running."""
    _apply("remove", ids, _filter(state, queue, name, tenant), max,
           lambda ids: [queries.remove(i) for i in ids], queries.remove_where, dsn)


@queues_app.command("list")
def queues_list(dsn: DsnOption = None) -> None:
    """Every queue: paused or not, counts by state, oldest runnable age, jobs no live
    worker can run (unserved) and jobs a limit holds back (limited); then each limit
    group in use, so "held by a limit" and "no worker" tell apart."""
    with connected_client(dsn) as client:
        stats = client.run(queries.queue_stats())
        use = client.run(queries.limit_stats())
    table = Table("queue", "paused", "ready", "running", "parked", "interrupted", "succeeded",
                  "failed", "dead", "cancelled", "oldest ready (s)", "unserved", "limited")
    for q in stats:
        table.add_row(q.queue, "yes" if q.paused else "", str(q.ready), str(q.running),
                      str(q.parked), str(q.interrupted), str(q.succeeded), str(q.failed),
                      str(q.dead), str(q.cancelled), f"{q.oldest_ready_s:.1f}", str(q.unserved),
                      str(q.limited))
    console.print(table)
    if use:
        console.print(use_table(use))


@queues_app.command("pause")
def queues_pause(queue: Annotated[str, typer.Argument(help="The queue.")],
                 dsn: DsnOption = None) -> None:
    """Stop workers from claiming this queue's jobs (enqueue still works)."""
    with connected_client(dsn) as client:
        client.run(queries.pause_queue(queue))
    console.print(f"paused {queue}")


@queues_app.command("resume")
def queues_resume(queue: Annotated[str, typer.Argument(help="The queue.")],
                  dsn: DsnOption = None) -> None:
    """Let workers claim this queue's jobs again."""
    with connected_client(dsn) as client:
        client.run(queries.resume_queue(queue))
    console.print(f"resumed {queue}")


def workers(dsn: DsnOption = None) -> None:
    """List live workers, and waiting jobs no live worker can run."""
    with psycopg.connect(dsn_of(dsn), autocommit=True) as conn:
        client = Client(conn)
        live = client.run(queries.workers())
        unserved = client.run(queries.unserved_jobs())
    table = Table(title=f"{len(live)} live worker(s)")
    for column in ("id", "host", "pid", "queues", "jobs", "concurrency", "running",
                   "started", "last heartbeat"):
        table.add_column(column)
    for w in live:
        table.add_row(w.id, w.host or "", str(w.pid or ""), ", ".join(w.queues),
                      str(len(w.names)), str(w.concurrency), str(w.running),
                      w.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                      w.heartbeat_at.strftime("%H:%M:%S"))
    console.print(table)
    if unserved:
        missing = Table(title="waiting jobs no live worker can run")
        for column in ("queue", "name", "waiting", "oldest (s)"):
            missing.add_column(column)
        for u in unserved:
            missing.add_row(u.queue, u.name, str(u.waiting), f"{u.oldest_s:.0f}")
        console.print(missing)
