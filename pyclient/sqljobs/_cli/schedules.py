"""`sqljobs schedules ...`: manage schedules at run time."""

from __future__ import annotations

from typing import Annotated

import typer

from sqljobs._app import App
from sqljobs._cli import output
from sqljobs._cli.common import (
    DsnOption,
    database_errors,
    dsn_of,
    json_option,
    load_app,
    usage_error,
)
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client.errors import DatabaseError, SqljobsError

schedules_app = typer.Typer(
    help="Manage schedules at run time: list, add, pause, resume, remove.",
    no_args_is_help=True,
)


def _schedules_app(target: str | None, dsn: str | None) -> App:
    """The App named (its declared jobs give defaults), else a bare App on the DSN."""
    application = load_app(target) if target else App()
    application.pools.given = dsn_of(dsn if dsn is not None else application.pools.given)
    return application


AppOption = Annotated[str | None, typer.Option(
    "--app", help="module:attribute of the App: its declared jobs validate the payload and "
                  "give queue and retry defaults.")]


@schedules_app.command("list")
def schedules_list(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """List schedules with their next fire time. With --json: {"schedules": [...]}."""
    application = _schedules_app(None, dsn)
    with database_errors(), application:
        found = application.schedules.list()
    if as_json:
        output.emit_json({"schedules": [s.model_dump(mode="json") for s in found]})
        return
    table = Listing("name", "job", "cron", "timezone", "catch up", "state", "next fire (UTC)",
                    "last fired (UTC)", "origin", title=f"{len(found)} schedule(s)")
    for s in found:
        table.add_row(
            s.name, s.job_name, s.cron, s.timezone, s.catch_up,
            "paused" if s.paused else "active",
            s.next_fire_at.strftime("%Y-%m-%d %H:%M:%S") if s.next_fire_at else "-",
            s.last_fired_at.strftime("%Y-%m-%d %H:%M:%S") if s.last_fired_at else "-",
            s.origin)
    output.show(table)


@schedules_app.command("add")
def schedules_add(
    name: Annotated[str, typer.Argument(help="The schedule's name.")],
    job: Annotated[str, typer.Option(help="The job type each occurrence enqueues.")],
    cron: Annotated[str, typer.Option(help="Cron expression (5 fields, or 6 with seconds "
                                           "first).")],
    timezone: Annotated[str, typer.Option(help="IANA time zone the cron is read in.")] = "UTC",
    catch_up: Annotated[str, typer.Option(help="all | latest | none.")] = "latest",
    payload: Annotated[str, typer.Option(help="Payload of each occurrence, JSON.")] = "{}",
    queue: Annotated[str | None, typer.Option(help="Queue (default: the job's).")] = None,
    target: AppOption = None,
    dsn: DsnOption = None,
) -> None:
    """Add a schedule (or replace its definition); it fires from now on."""
    body = json_option(payload, "--payload")
    application = _schedules_app(target, dsn)
    options = {} if queue is None else {"queue": queue}
    # What the database refuses is exit code 1 (database_errors); a bad cron, time zone
    # or policy is found before it is sent, exit code 2.
    with database_errors():
        try:
            with application:
                created = application.schedules.add(name, job=job, cron=cron,
                                                    timezone=timezone, catch_up=catch_up,
                                                    payload=body, **options)
        except (SqljobsError, ValueError) as error:
            if isinstance(error, DatabaseError):
                raise
            usage_error(str(error))
    output.say(f"schedule {name} {'added' if created else 'updated'}")


def _schedule_verb(verb: str, name: str, dsn: str | None) -> None:
    application = _schedules_app(None, dsn)
    with database_errors(), application:  # no such schedule: exit code 1, as everywhere
        getattr(application.schedules, verb)(name)
    output.say(f"schedule {name}: {verb}d")


@schedules_app.command("pause")
def schedules_pause(name: Annotated[str, typer.Argument(help="The schedule.")],
                    dsn: DsnOption = None) -> None:
    """Stop firing a schedule until it is resumed."""
    _schedule_verb("pause", name, dsn)


@schedules_app.command("resume")
def schedules_resume(name: Annotated[str, typer.Argument(help="The schedule.")],
                     dsn: DsnOption = None) -> None:
    """Fire a paused schedule again, from now (what it missed while paused is skipped)."""
    _schedule_verb("resume", name, dsn)


@schedules_app.command("remove")
def schedules_remove(name: Annotated[str, typer.Argument(help="The schedule.")],
                     dsn: DsnOption = None) -> None:
    """Delete a schedule (jobs it enqueued stay). A declared task comes back when a
    scheduler of that app starts: remove it from the code too."""
    _schedule_verb("remove", name, dsn)
