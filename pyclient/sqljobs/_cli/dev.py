"""`sqljobs dev ...`: the embedded PostgreSQL that commands use when no DSN is given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import psycopg
import typer
from rich.markup import escape

from sqljobs._cli.common import console, err_console
from sqljobs._client.database import DSN_VARIABLES
from sqljobs._client.errors import SqljobsError
from sqljobs._dev import embedded

dev_app = typer.Typer(no_args_is_help=True)


@dev_app.callback()
def dev_options(
    directory: Annotated[Path | None, typer.Option(
        "--dir", envvar=embedded.DEV_DIR_VARIABLE, show_envvar=True, file_okay=False,
        help="The server's data directory: one server per directory, so a project can "
             "have its own (default: one per user, shared by all their checkouts).")] = None,
) -> None:
    """Manage the embedded PostgreSQL that commands use when no DSN is given.

    It belongs to the user: all their checkouts and virtualenvs share one server.
    A project gets a server (and database) of its own with --dir or $SQLJOBS_DEV_DIR.
    """
    if directory is not None:
        # data_dir() reads the variable: the subcommand (and what it starts) use this one
        os.environ[embedded.DEV_DIR_VARIABLE] = str(directory.expanduser().absolute())


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


def _sharing_note(where: Path) -> str:
    if os.environ.get(embedded.DEV_DIR_VARIABLE):
        return (f"this directory's: only commands given it (${embedded.DEV_DIR_VARIABLE} "
                f"or --dir) use it")
    return (f"this user's: every checkout and virtualenv of theirs uses it "
            f"(one per project: --dir or ${embedded.DEV_DIR_VARIABLE})")


def _print_server(server: embedded.Server) -> None:
    console.print(f"  data directory  {server.data_dir}", soft_wrap=True, highlight=False)
    console.print(f"  scope           {_sharing_note(server.data_dir)}", soft_wrap=True,
                  highlight=False)
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
        console.print(f"  scope           {_sharing_note(where)}", soft_wrap=True,
                      highlight=False)
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
def devdsn_of() -> None:
    """Print the embedded PostgreSQL's DSN, starting it first if needed.

    For shells: export SQLJOBS_DSN="$(sqljobs dev dsn)"
    """
    server = _embedded_server_or_exit(start=True)
    assert server is not None
    typer.echo(server.dsn())

