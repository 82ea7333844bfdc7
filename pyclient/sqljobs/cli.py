"""The `sqljobs` command.

Typer gives typed options and `--help` from the function signatures; Rich prints
tables and progress (Typer uses it for its own help and errors too).
"""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer
from rich.console import Console

from sqljobs import migrate as migrate_module
from sqljobs import queries
from sqljobs._version import SCHEMA_VERSION
from sqljobs.app import App as SqljobsApp
from sqljobs.app import resolve_dsn
from sqljobs.client import Client
from sqljobs.errors import SqljobsError

app = typer.Typer(
    name="sqljobs",
    help="Durable jobs with PostgreSQL as the engine.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="PostgreSQL DSN (default: $SQLJOBS_DSN, then $DATABASE_URL)."),
]


def _dsn(dsn: str | None) -> str:
    try:
        return resolve_dsn(dsn)
    except SqljobsError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error


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
    import sys

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
    drain_timeout: Annotated[float, typer.Option(
        help="On SIGTERM, seconds running jobs get to finish before going back "
             "interrupted.")] = 30.0,
    listen: Annotated[bool, typer.Option(help="Wake on LISTEN jobs_wake (else poll only).")] = True,
    listen_retry: Annotated[float, typer.Option(
        help="Seconds before reconnecting a lost LISTEN connection (doubles up to 30).")] = 1.0,
    log_level: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text or json (one object per line).")] = "text",
) -> None:
    """Run the jobs an app declares until SIGTERM (drain) or a second signal (stop now)."""
    from sqljobs.logs import setup_logging
    from sqljobs.worker import Worker

    if log_format not in ("text", "json"):
        err_console.print("[red]error:[/red] --log-format is text or json")
        raise typer.Exit(2)
    setup_logging(log_level, "json" if log_format == "json" else "text")
    application = _load_app(target)
    if dsn is not None:
        application._dsn = dsn
    else:
        _dsn(application._dsn)  # fail early, clearly, when no DSN is known
    try:
        code = Worker(application, queue or None, concurrency, lease_s=lease,
                      poll_interval=poll_interval, drain_timeout=drain_timeout,
                      listen=listen, listen_retry_s=listen_retry).run_sync()
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


def main() -> None:
    app()
