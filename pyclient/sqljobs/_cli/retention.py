"""`sqljobs purge` and `sqljobs retention ...`: retention by hand (sql/95_retention.sql).

`sqljobs purge` runs `jobs.purge` in bounded batches until nothing eligible is left
(each batch its own short transaction), or counts only with --dry-run. The ages given
here apply to this run; `sqljobs retention set` stores them for every caller (the
scheduler's leader, SQL callers, later runs). docs/howto-retention.md has the rules.
"""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta
from typing import Annotated, Any

import psycopg
import typer

from sqljobs._app.maintenance import eligible, purge_table
from sqljobs._cli import output
from sqljobs._cli.common import (
    DsnOption,
    connected_client,
    console,
    dsn_of,
    err_console,
    finite,
    in_range,
    load_app,
    whole,
)
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._client.records import PurgeStep, RetentionPolicy

retention_app = typer.Typer(
    help="The stored retention policy jobs.purge and the scheduler use: show, set, remove.",
    no_args_is_help=True,
)

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
AGE_HELP = "seconds, or 90s, 15m, 12h, 7d, 2w, or forever"
KEYS = ("succeeded", "failed", "dead", "cancelled", "awaited", "events")


def parse_age(text: str) -> float | str:
    """'7d' -> 604800.0; 'forever' stays 'forever' (jobs.retention_age reads it)."""
    value = text.strip().lower()
    if value == "forever":
        return "forever"
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", value)
    if not match:
        raise typer.BadParameter(f"{text!r} is not an age ({AGE_HELP})")
    seconds = float(match.group(1)) * UNITS[match.group(2) or "s"]
    if not in_range(seconds):  # thousands of digits read as infinity, 1e9w, ...
        raise typer.BadParameter(f"{text!r} is more than a century: give a shorter age, "
                                 "or forever")
    return seconds


def show_age(seconds: float) -> str:
    if math.isinf(seconds):
        return "forever"
    for unit in ("w", "d", "h", "m"):
        if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
            return f"{seconds / UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def ages_of(**given: str | None) -> dict[str, Any]:
    return {key: parse_age(value) for key, value in given.items() if value is not None}


def policy_table(rows: list[RetentionPolicy], title: str) -> Listing:
    table = Listing("queue (* = every other)", *KEYS, title=title)
    for r in rows:
        table.add_row(r.queue,
                      *(show_age(getattr(r, f"{key}_s")) for key in KEYS))
    return table


SucceededOption = Annotated[str | None, typer.Option(help=f"Succeeded jobs: {AGE_HELP}.")]
FailedOption = Annotated[str | None, typer.Option(help=f"Failed jobs: {AGE_HELP}.")]
DeadOption = Annotated[str | None, typer.Option(help=f"Dead jobs: {AGE_HELP}.")]
CancelledOption = Annotated[str | None, typer.Option(help=f"Cancelled jobs: {AGE_HELP}.")]
AwaitedOption = Annotated[str | None, typer.Option(
    help=f"The least a job someone awaited (app.result) is kept: {AGE_HELP}.")]
EventsOption = Annotated[str | None, typer.Option(help=f"Events: {AGE_HELP}.")]


def purge(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Count what is eligible; delete nothing.")] = False,
    batch: Annotated[int, typer.Option(
        help="Rows one batch (one transaction) deletes at most, 1..100000.", **whole())] = 1000,
    max_batches: Annotated[int | None, typer.Option(
        help="Stop after this many batches (default: until nothing eligible is left).",
        **whole())] = None,
    pause: Annotated[float, typer.Option(
        help="Seconds to sleep between batches (spreads the load).", **finite())] = 0.0,
    queue: Annotated[str | None, typer.Option(
        help="Apply the ages given here to this queue only (others keep the stored "
             "policy).")] = None,
    succeeded: SucceededOption = None,
    failed: FailedOption = None,
    dead: DeadOption = None,
    cancelled: CancelledOption = None,
    awaited: AwaitedOption = None,
    events: EventsOption = None,
    target: Annotated[str | None, typer.Option(
        "--app", help="module:attribute of an App: its declared purges (app.purge) join "
                      "this run, each table in bounded batches of its own.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Delete finished jobs (with their steps, waits, outbox rows) and old events by age,
    in bounded batches; the ages given override the stored policy for this run. With
    --app, the app's own tables declared with app.purge too."""
    if not 1 <= batch <= 100_000:
        raise typer.BadParameter("--batch must be between 1 and 100000")
    if max_batches is not None and max_batches < 1:
        raise typer.BadParameter("--max-batches must be at least 1")
    ages = ages_of(succeeded=succeeded, failed=failed, dead=dead, cancelled=cancelled,
                   awaited=awaited, events=events)
    if queue is not None and "events" in ages:
        raise typer.BadParameter("--events has no queue: give it without --queue")
    policy: dict[str, Any] | None = ({"queues": {queue: ages}} if queue is not None
                                     else ages) or None
    with connected_client(dsn) as client:
        in_effect = client.run(queries.retention_policy(policy))
        if dry_run:
            step = client.run(queries.purge(batch, True, policy))
            output.show(policy_table(in_effect, "retention in effect"),
                        _app_purges(target, dsn, client, dry_run=True, max_batches=None))
            output.say(f"eligible now: {step.jobs_remaining:,} jobs, "
                       f"{step.events_remaining:,} events (dry run: nothing deleted)")
            return
        totals = {"jobs": 0, "outbox": 0, "events": 0}
        batches = 0
        step = PurgeStep(jobs=0, outbox=0, events=0, jobs_remaining=0, events_remaining=0)
        with console.status("purging") as status:
            while max_batches is None or batches < max_batches:
                step = client.run(queries.purge(batch, False, policy))
                batches += 1
                for key in totals:
                    totals[key] += getattr(step, key)
                status.update(f"purging: {totals['jobs']:,} jobs, {totals['events']:,} events "
                              f"deleted; {step.remaining:,} eligible")
                # Done when nothing is left, or when a batch found nothing to take (the
                # rest is held by other transactions: a later run gets it).
                if step.remaining == 0 or step.deleted == 0:
                    break
                if pause > 0:
                    time.sleep(pause)
        app_tables = _app_purges(target, dsn, client, dry_run=False,
                                 max_batches=max_batches)
    output.show(app_tables)
    output.say(f"purged {totals['jobs']:,} jobs ({totals['outbox']:,} outbox rows with "
               f"them) and {totals['events']:,} events in {batches} batch(es); "
               f"{step.remaining:,} still eligible")


def _app_purges(target: str | None, dsn: str | None, client: Client, *, dry_run: bool,
                max_batches: int | None) -> Listing | None:
    """The app's declared purges (app.purge), one clock reading for all: each table's
    eligible rows (dry run), or what was deleted from it."""
    if target is None:
        return None
    application = load_app(target)
    now = client.run(queries.database_now())
    table = Listing("purge", "table", "column", "older than",
                    "eligible" if dry_run else "deleted",
                    title="the app's tables" + (" (dry run)" if dry_run else ""))
    with psycopg.connect(dsn_of(dsn), autocommit=True) as conn:  # the app's privileges
        for name, handle in application.purges.items():
            for kept in handle.purge.tables:
                cutoff = now - timedelta(seconds=kept.age_s)
                found = (eligible(conn, kept, cutoff) if dry_run
                         else purge_table(conn, kept, cutoff, max_batches))
                table.add_row(name, kept.table, kept.column, show_age(kept.age_s),
                              f"{found:,}")
    return table


@retention_app.command("show")
def retention_show(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The ages in effect: '*' (every queue without its own) and each overridden queue.
    With --json: {"retention": [{"queue", "succeeded_s", ...}]}, null for forever."""
    with connected_client(dsn) as client:
        rows = client.run(queries.retention_policy())
    if as_json:
        output.emit_json({"retention": [r.model_dump(mode="python") for r in rows]})
        return
    output.show(policy_table(rows, "retention in effect (stored, then built-in defaults)"))


@retention_app.command("set")
def retention_set(
    queue: Annotated[str | None, typer.Option(
        help="The queue to override (default: '*', every queue without its own).")] = None,
    succeeded: SucceededOption = None,
    failed: FailedOption = None,
    dead: DeadOption = None,
    cancelled: CancelledOption = None,
    awaited: AwaitedOption = None,
    events: EventsOption = None,
    dsn: DsnOption = None,
) -> None:
    """Store ages (ages not given keep their stored value)."""
    ages = ages_of(succeeded=succeeded, failed=failed, dead=dead, cancelled=cancelled,
                   awaited=awaited, events=events)
    if not ages:
        err_console.print("[red]error:[/red] give at least one age, e.g. --succeeded 12h")
        raise typer.Exit(2)
    with connected_client(dsn) as client:
        client.run(queries.retention_put(queue, ages))
        rows = client.run(queries.retention_policy())
    output.show(policy_table(rows, "retention in effect"))


@retention_app.command("remove")
def retention_remove(
    queue: Annotated[str | None, typer.Option(
        help="The queue whose override to remove (default: '*': the built-in defaults "
             "apply again).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Remove a stored row."""
    with connected_client(dsn) as client:
        removed = client.run(queries.retention_remove(queue))
    output.say(f"retention of {queue or '*'}: {'removed' if removed else 'none stored'}")
