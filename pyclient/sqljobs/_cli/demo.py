"""`sqljobs demo`: every feature on example jobs, in one process."""

from __future__ import annotations

import os
from typing import Annotated

import psycopg
import typer
from rich.markup import escape

from sqljobs._cli.common import DsnOption, console, dsn_of, err_console, finite
from sqljobs._client.database import DSN_VARIABLES
from sqljobs._client.errors import SqljobsError


def demo(
    dsn: DsnOption = None,
    timeout: Annotated[float, typer.Option(
        **finite(10.0), help="Stop after this many seconds even if some job is not final.")
    ] = 50.0,
) -> None:
    """Show every feature on example jobs, then print a summary; the jobs stay in the database.

    It shows retries, a dead letter, a saga with a sleep, an event and compensations.
    It shows a cron task and child jobs too, run by a worker and a scheduler in this process.
    """
    from sqljobs._demo import run_demo

    embedded_default = not (dsn or any(os.environ.get(v) for v in DSN_VARIABLES))
    target = dsn_of(dsn)
    try:
        code = run_demo(target, embedded=embedded_default, timeout_s=timeout, console=console)
    except (SqljobsError, psycopg.Error) as error:
        err_console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(2) from error
    raise typer.Exit(code)
