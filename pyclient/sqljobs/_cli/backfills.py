"""`sqljobs backfills ...`: the backfill ledger for operators and deploy pipelines.

    sqljobs backfills --app myapp:app                 the ledger, with progress
    sqljobs backfills --app myapp:app --pending       declared minus completed; exit 5 if any
    sqljobs backfills run NAME --app myapp:app        enqueue a run (the worker does it)
    sqljobs backfills pause|resume|cancel NAME        the operator's verbs

The ledger is `jobs.backfills()`; pending is the app's declared backfills (those that
may run in its environment) minus the rows completed there under their checksum.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sqljobs._app import App
from sqljobs._app.backfills import environment_of, pending
from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, database_errors, dsn_of, load_app, usage_error
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import queries
from sqljobs._client.records import BackfillRecord

backfills_app = typer.Typer(
    help="The backfill ledger: list with progress, what is pending, run, pause, resume, "
         "cancel.",
)

AppOption = Annotated[str | None, typer.Option(
    "--app", help="module:attribute of the App whose backfills these are (needed by "
                  "--pending and run).")]
EnvironmentOption = Annotated[str | None, typer.Option(
    "--environment", help="The environment (default: the app's, else "
                          "$SQLJOBS_ENVIRONMENT, else \"default\").")]
ScopeOption = Annotated[str, typer.Option("--scope", help="The run's scope (default: \"\").")]


def _app(target: str | None, dsn: str | None) -> App:
    application = load_app(target) if target else App()
    application.pools.given = dsn_of(dsn if dsn is not None else application.pools.given)
    return application


def progress(row: BackfillRecord) -> str:
    """How far a run got: rows of the expected count (with its percentage), or rows."""
    if row.expected:
        return f"{row.rows_done}/{row.expected} ({100 * row.rows_done / row.expected:.0f}%)"
    return f"{row.rows_done}"


@backfills_app.callback(invoke_without_command=True)
def backfills_list(
    ctx: typer.Context,
    target: AppOption = None,
    environment: EnvironmentOption = None,
    only_pending: Annotated[bool, typer.Option(
        "--pending", help="List the declared backfills that have not completed in the "
                          "environment; exit code 5 when there is any.")] = False,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """The ledger of one environment (what ran, with progress), or with --pending what
    is declared and has not completed there. With --json: {"backfills": [...]} or
    {"pending": [...]}."""
    if ctx.invoked_subcommand is not None:
        return
    if only_pending and target is None:
        usage_error("--pending needs --app: what is pending is what the app declares")
    application = _app(target, dsn)
    where = environment_of(environment or (application.environment if target else None))
    with database_errors(), application:
        rows = application.client.run(queries.backfills(where))
    if only_pending:
        declared = {name: h.backfill for name, h in application.backfills.items()}
        found = pending(declared, rows, where)
        if as_json:
            output.emit_json({"environment": where, "pending": [
                {"name": p.name, "scope": p.scope, "reason": p.reason, "checksum": p.checksum}
                for p in found]})
        else:
            table = Listing("backfill", "scope", "why", title=f"{len(found)} backfill(s) "
                                                              f"pending in {where}")
            for p in found:
                table.add_row(p.name, p.scope, p.reason)
            output.show(table)
        if found:
            raise typer.Exit(output.PENDING)
        return
    if as_json:
        output.emit_json({"environment": where,
                          "backfills": [r.model_dump(mode="json") for r in rows]})
        return
    table = Listing("backfill", "scope", "status", "progress", "batches", "job", "started by",
                    "started (UTC)", "updated (UTC)", title=f"{len(rows)} backfill(s) in {where}")
    for r in rows:
        table.add_row(r.name, r.scope, r.status, progress(r), r.batches, r.job_id,
                      r.started_by, r.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                      r.updated_at.strftime("%Y-%m-%d %H:%M:%S"))
    output.show(table)


@backfills_app.command("run")
def backfills_run(
    name: Annotated[str, typer.Argument(help="The declared backfill.")],
    target: Annotated[str, typer.Option("--app", help="module:attribute of the App.")],
    scope: ScopeOption = "",
    key: Annotated[str | None, typer.Option(
        "--key", help="An idempotency key for this start (a release id): the same key "
                      "answers the same job.")] = None,
    rerun: Annotated[bool, typer.Option(
        "--rerun", help="Start again from the beginning, even over a completed run.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Enqueue a run of a declared backfill; a worker of the app runs it."""
    application = _app(target, dsn)
    handle = application.backfills.get(name)
    if handle is None:
        usage_error(f"the app declares no backfill named {name!r}")
    with database_errors(), application:
        started = handle.start(scope, key=key, rerun=rerun)
    output.say(f"backfill {name}: job {started.id} "
               f"{'already enqueued' if started.deduped else 'enqueued'}")


def _verb(verb: str, name: str, scope: str, environment: str | None, target: str | None,
          dsn: str | None) -> None:
    application = _app(target, dsn)
    where = environment_of(environment or (application.environment if target else None))
    call = {"pause": queries.backfill_pause, "resume": queries.backfill_resume,
            "cancel": queries.backfill_cancel}[verb]
    with database_errors(), application:
        application.client.run(call(name, scope, where))
        rows = application.client.run(queries.backfills(where))
    row = next((r for r in rows if r.name == name and r.scope == scope), None)
    shown = f" at {progress(row)} rows" if row is not None else ""
    output.say(f"backfill {name} ({where}): {row.status if row else verb}{shown}")


@backfills_app.command("pause")
def backfills_pause(name: Annotated[str, typer.Argument(help="The backfill.")],
                    scope: ScopeOption = "", environment: EnvironmentOption = None,
                    target: AppOption = None, dsn: DsnOption = None) -> None:
    """Pause a running backfill after its batch in hand; its job parks until resumed."""
    _verb("pause", name, scope, environment, target, dsn)


@backfills_app.command("resume")
def backfills_resume(name: Annotated[str, typer.Argument(help="The backfill.")],
                     scope: ScopeOption = "", environment: EnvironmentOption = None,
                     target: AppOption = None, dsn: DsnOption = None) -> None:
    """Resume a paused backfill: its parked job wakes and goes on from its cursor."""
    _verb("resume", name, scope, environment, target, dsn)


@backfills_app.command("cancel")
def backfills_cancel(name: Annotated[str, typer.Argument(help="The backfill.")],
                     scope: ScopeOption = "", environment: EnvironmentOption = None,
                     target: AppOption = None, dsn: DsnOption = None) -> None:
    """Cancel a running or paused backfill and its job; a later run goes on from its
    cursor (`run --rerun` starts over)."""
    _verb("cancel", name, scope, environment, target, dsn)


__all__ = ["backfills_app"]
