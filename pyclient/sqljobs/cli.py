"""The `sqljobs` command.

Typer gives typed options and `--help` from the function signatures; Rich prints
tables and progress (Typer uses it for its own help and errors too).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import psycopg
import typer
from rich.markup import escape

from sqljobs import embedded, queries
from sqljobs import migrate as migrate_module
from sqljobs._cli_common import DsnOption, _dsn, console, err_console
from sqljobs._version import SCHEMA_VERSION
from sqljobs.app import DSN_VARIABLES
from sqljobs.app import App as SqljobsApp
from sqljobs.cli_operate import jobs_app, queues_app
from sqljobs.client import Client
from sqljobs.errors import SqljobsError

app = typer.Typer(
    name="sqljobs",
    help="Durable jobs with PostgreSQL as the engine.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def migrate(
    dsn: DsnOption = None,
    sql: Annotated[bool, typer.Option(help="Print the SQL instead of running it.")] = False,
) -> None:
    """Install or upgrade the sqljobs schema (the `jobs` schema) in a database."""
    if sql:
        typer.echo(migrate_module.render_sql(), nl=False)
        return
    target = _dsn(dsn)
    with console.status("applying sqljobs migrations"):
        migrate_module.upgrade(target)
    with psycopg.connect(target, autocommit=True) as conn:
        version = Client(conn).run(queries.schema_version())
    console.print(f"sqljobs schema version {version} is installed")


@app.command()
def version() -> None:
    """Print the client version and the schema version it needs."""
    from importlib.metadata import version as dist_version

    console.print(f"sqljobs {dist_version('sqljobs')} (schema version {SCHEMA_VERSION})")


def _load_app(target: str) -> SqljobsApp:
    """`package.module:attribute` -> the App it names (the current directory is importable)."""
    import importlib
    import os

    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        err_console.print(f"[red]error:[/red] expected module:attribute, got {target!r}")
        raise typer.Exit(2)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        found = getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        err_console.print(f"[red]error:[/red] cannot load {target!r}: {error}")
        raise typer.Exit(2) from error
    if not isinstance(found, SqljobsApp):
        err_console.print(
            f"[red]error:[/red] {target!r} is a {type(found).__name__}, not a sqljobs App")
        raise typer.Exit(2)
    return found


@app.command()
def worker(
    target: Annotated[str, typer.Argument(help="The App to serve, as module:attribute.")],
    queue: Annotated[list[str] | None, typer.Option(
        "--queue", "-q",
        help="A queue to serve (repeat; default: every queue the app's jobs use).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1,
                                             help="Jobs run at once.")] = 10,
    dsn: DsnOption = None,
    lease: Annotated[float, typer.Option(
        help="Lease per claim, seconds (renewed every lease/3).")] = 30.0,
    poll_interval: Annotated[float, typer.Option(help="Claim at least this often, seconds.")] = 1.0,
    prefetch: Annotated[int | None, typer.Option(
        min=0, help="Jobs claimed ahead into a local queue, beyond the free slots "
                    "(default: as many as --concurrency; 0: claim only for free slots).")
    ] = None,
    drain_timeout: Annotated[float, typer.Option(
        help="On SIGTERM, seconds running jobs get to finish before going back "
             "interrupted.")] = 30.0,
    listen: Annotated[bool, typer.Option(help="Wake on LISTEN jobs_wake (else poll only).")] = True,
    listen_retry: Annotated[float, typer.Option(
        help="Seconds before reconnecting a lost LISTEN connection (doubles up to 30).")] = 1.0,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
    with_relay: Annotated[bool, typer.Option(
        "--with-relay", help="Also run the outbox relay in this process (`sqljobs relay`).")
    ] = False,
    with_scheduler: Annotated[bool, typer.Option(
        "--with-scheduler", help="Also run a scheduler in this process (`sqljobs scheduler`); "
                                 "one of all schedulers leads.")] = False,
) -> None:
    """Run the jobs an app declares until SIGTERM (drain) or a second signal (stop now)."""
    from sqljobs.logs import setup_logging
    from sqljobs.worker import Worker

    if log_format not in ("text", "json"):
        err_console.print("[red]error:[/red] --log-format is text or json")
        raise typer.Exit(2)
    setup_logging(log_level, "json" if log_format == "json" else "text")
    application = _load_app(target)
    # The --dsn flag, else the app's own, else $SQLJOBS_DSN / $DATABASE_URL, else embedded.
    application._dsn = _dsn(dsn if dsn is not None else application._dsn)
    try:
        runner = Worker(application, queue or None, concurrency, lease_s=lease,
                        poll_interval=poll_interval, prefetch=prefetch,
                        drain_timeout=drain_timeout,
                        listen=listen, listen_retry_s=listen_retry,
                        install_signals=not (with_relay or with_scheduler))
        if with_relay or with_scheduler:
            import asyncio

            from sqljobs.relay import Relay
            from sqljobs.roles import Role, run_roles
            from sqljobs.scheduler import Scheduler

            roles: list[Role] = [runner]
            if with_relay:
                roles.append(Relay(application, install_signals=False))
            if with_scheduler:
                roles.append(Scheduler(application, install_signals=False))
            code = asyncio.run(run_roles(roles))
        else:
            code = runner.run_sync()
    except SqljobsError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    raise typer.Exit(code)


@app.command()
def workers(dsn: DsnOption = None) -> None:
    """List live workers, and waiting jobs no live worker can run."""
    from rich.table import Table

    with psycopg.connect(_dsn(dsn), autocommit=True) as conn:
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


# -- sqljobs demo ---------------------------------------------------------------------------


@app.command()
def demo(
    dsn: DsnOption = None,
    timeout: Annotated[float, typer.Option(
        min=10.0, help="Stop after this many seconds even if some job is not final.")] = 50.0,
) -> None:
    """Show every feature on example jobs (retries, a dead letter, a saga with a sleep, an
    event and compensations, a cron task, child jobs), served by a worker and a scheduler
    in this process; ends by itself with a summary. The jobs stay in the database."""
    from sqljobs.demo import run_demo

    embedded_default = not (dsn or any(os.environ.get(v) for v in DSN_VARIABLES))
    target = _dsn(dsn)
    try:
        code = run_demo(target, embedded=embedded_default, timeout_s=timeout, console=console)
    except (SqljobsError, psycopg.Error) as error:
        err_console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from error
    raise typer.Exit(code)


# -- sqljobs relay: the transactional outbox ----------------------------------------------


def _logging(log_level: str, log_format: str) -> None:
    from sqljobs.logs import setup_logging

    if log_format not in ("text", "json"):
        err_console.print("[red]error:[/red] --log-format is text or json")
        raise typer.Exit(2)
    setup_logging(log_level, "json" if log_format == "json" else "text")


@app.command()
def relay(
    target: Annotated[str, typer.Argument(help="The App whose database to relay, as "
                                               "module:attribute.")],
    dsn: DsnOption = None,
    batch: Annotated[int, typer.Option(min=1, max=10_000,
                                       help="Staged rows claimed per step.")] = 500,
    lease: Annotated[float, typer.Option(
        help="Lease on a claimed batch, seconds: a dead relay's batch waits this long.")] = 30.0,
    poll_interval: Annotated[float, typer.Option(
        help="Look for staged rows at least this often, seconds.")] = 1.0,
    listen: Annotated[bool, typer.Option(
        help="Wake on LISTEN jobs_outbox (else poll only).")] = True,
    retention: Annotated[float, typer.Option(
        help="Keep published outbox rows this long, seconds, then purge them.")] = 86_400.0,
    drain_timeout: Annotated[float, typer.Option(
        help="On SIGTERM, seconds to publish the batch held before giving up.")] = 30.0,
    relay_id: Annotated[str | None, typer.Option(help="This relay's id (default: host:pid:random; "
                                                      "must be unique).")] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
) -> None:
    """Publish staged jobs (the outbox) as jobs until SIGTERM (drain) or a second signal."""
    from sqljobs.relay import Relay

    _logging(log_level, log_format)
    application = _load_app(target)
    application._dsn = _dsn(dsn if dsn is not None else application._dsn)
    try:
        code = Relay(application, batch=batch, lease_s=lease, poll_interval=poll_interval,
                     listen=listen, retention_s=retention, drain_timeout=drain_timeout,
                     relay_id=relay_id).run_sync()
    except SqljobsError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    raise typer.Exit(code)


# -- sqljobs scheduler / schedules: cron tasks -------------------------------------------


@app.command()
def scheduler(
    target: Annotated[str, typer.Argument(help="The App whose tasks to schedule, as "
                                               "module:attribute.")],
    dsn: DsnOption = None,
    lease: Annotated[float, typer.Option(
        help="Leader lease, seconds: a dead leader is replaced within this.")] = 10.0,
    tick: Annotated[float, typer.Option(
        help="Renew the lease and look for due occurrences at least this often, seconds "
             "(at most lease/3).")] = 1.0,
    misfire_grace: Annotated[float | None, typer.Option(
        help="catch_up=none: how late an occurrence may still fire, seconds "
             "(default max(5, 2*tick)).")] = None,
    scheduler_id: Annotated[str | None, typer.Option(
        help="This scheduler's id (default: host:pid:random; must be unique).")] = None,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
) -> None:
    """Fire the app's schedules as jobs (one leader among all schedulers) until SIGTERM."""
    from sqljobs.scheduler import Scheduler

    _logging(log_level, log_format)
    application = _load_app(target)
    application._dsn = _dsn(dsn if dsn is not None else application._dsn)
    try:
        code = Scheduler(application, lease_s=lease, tick=tick, misfire_grace_s=misfire_grace,
                         scheduler_id=scheduler_id).run_sync()
    except SqljobsError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    raise typer.Exit(code)


schedules_app = typer.Typer(
    help="Manage schedules at run time: list, add, pause, resume, remove.",
    no_args_is_help=True,
)
app.add_typer(schedules_app, name="schedules")


def _schedules_app(target: str | None, dsn: str | None) -> SqljobsApp:
    """The App named (its declared jobs give defaults), else a bare App on the DSN."""
    application = _load_app(target) if target else SqljobsApp()
    application._dsn = _dsn(dsn if dsn is not None else application._dsn)
    return application


AppOption = Annotated[str | None, typer.Option(
    "--app", help="module:attribute of the App: its declared jobs validate the payload and "
                  "give queue and retry defaults.")]


@schedules_app.command("list")
def schedules_list(dsn: DsnOption = None) -> None:
    """List schedules with their next fire time."""
    from rich.table import Table

    application = _schedules_app(None, dsn)
    with application:
        found = application.schedules.list()
    table = Table(title=f"{len(found)} schedule(s)")
    for column in ("name", "job", "cron", "timezone", "catch up", "state", "next fire (UTC)",
                   "last fired (UTC)", "origin"):
        table.add_column(column)
    for s in found:
        table.add_row(
            s.name, s.job_name, s.cron, s.timezone, s.catch_up,
            "paused" if s.paused else "active",
            s.next_fire_at.strftime("%Y-%m-%d %H:%M:%S") if s.next_fire_at else "-",
            s.last_fired_at.strftime("%Y-%m-%d %H:%M:%S") if s.last_fired_at else "-",
            s.origin)
    console.print(table)


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
    import json

    try:
        body = json.loads(payload)
    except json.JSONDecodeError as error:
        err_console.print(f"[red]error:[/red] --payload is not JSON: {error}")
        raise typer.Exit(2) from error
    application = _schedules_app(target, dsn)
    options = {} if queue is None else {"queue": queue}
    try:
        with application:
            created = application.schedules.add(name, job=job, cron=cron, timezone=timezone,
                                                catch_up=catch_up, payload=body, **options)
    except (SqljobsError, ValueError) as error:
        err_console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from error
    console.print(f"schedule {name} {'added' if created else 'updated'}", highlight=False)


def _schedule_verb(verb: str, name: str, dsn: str | None) -> None:
    application = _schedules_app(None, dsn)
    try:
        with application:
            getattr(application.schedules, verb)(name)
    except SqljobsError as error:
        err_console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from error
    console.print(f"schedule {name}: {verb}d", highlight=False)


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


# -- sqljobs dev: the embedded PostgreSQL -------------------------------------------------

dev_app = typer.Typer(
    help="Manage the embedded PostgreSQL that commands use when no DSN is given.",
    no_args_is_help=True,
)
app.add_typer(dev_app, name="dev")


def _embedded_server_or_exit(start: bool) -> embedded.Server | None:
    """The running embedded server (started first when `start`), or exit 2 saying why."""
    try:
        if start:
            with err_console.status("starting the embedded PostgreSQL"):
                return embedded.ensure()
        return embedded.status()
    except (SqljobsError, psycopg.Error) as error:
        err_console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from error


def _dsn_variable_note(server: embedded.Server | None = None) -> None:
    """Warn when $SQLJOBS_DSN (or $DATABASE_URL) sends the other commands elsewhere."""
    for variable in DSN_VARIABLES:
        if value := os.environ.get(variable):
            if server is not None and value == server.dsn():
                return
            err_console.print(f"note: ${variable} is set, so the other commands use that "
                              f"database, not the embedded one", soft_wrap=True)
            return


def _print_server(server: embedded.Server) -> None:
    console.print(f"  data directory  {server.data_dir}", soft_wrap=True, highlight=False)
    console.print(f"  server          PostgreSQL {server.version}, pid {server.pid}",
                  highlight=False)
    console.print(f"  DSN             {server.dsn()}", soft_wrap=True, highlight=False)
    console.print(f"  log             {server.log_file}", soft_wrap=True, highlight=False)


@dev_app.command("start")
def dev_start() -> None:
    """Start the embedded PostgreSQL (or find it running) and install the schema."""
    server = _embedded_server_or_exit(start=True)
    assert server is not None
    console.print("the embedded PostgreSQL is running")
    _print_server(server)
    _dsn_variable_note(server)


@dev_app.command("status")
def dev_status() -> None:
    """Say whether the embedded PostgreSQL runs, where, and its DSN (exit 3 when not)."""
    server = _embedded_server_or_exit(start=False)
    if server is None:
        where = embedded.data_dir()
        made = (where / "PG_VERSION").exists()
        console.print(f"the embedded PostgreSQL is not running "
                      f"({'data directory' if made else 'not created yet; it would live at'} "
                      f"{where})", soft_wrap=True, highlight=False)
        _dsn_variable_note()
        raise typer.Exit(3)
    console.print("the embedded PostgreSQL is running")
    _print_server(server)
    _dsn_variable_note(server)


@dev_app.command("stop")
def dev_stop() -> None:
    """Stop the embedded PostgreSQL (its data stays for the next start)."""
    try:
        stopped = embedded.stop()
    except SqljobsError as error:
        err_console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from error
    if stopped is None:
        console.print("the embedded PostgreSQL is not running", highlight=False)
    else:
        console.print(f"stopped the embedded PostgreSQL at {stopped.data_dir}",
                      soft_wrap=True, highlight=False)


@dev_app.command("dsn")
def dev_dsn() -> None:
    """Print the embedded PostgreSQL's DSN, starting it first if needed.

    For shells: export SQLJOBS_DSN="$(sqljobs dev dsn)"
    """
    server = _embedded_server_or_exit(start=True)
    assert server is not None
    typer.echo(server.dsn())


app.add_typer(jobs_app, name="jobs")
app.add_typer(queues_app, name="queues")


def main() -> None:
    app()
