"""The `sqljobs` command.

Typer gives typed options and `--help` from the function signatures; Rich prints
tables and progress (Typer uses it for its own help and errors too).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from sqljobs import migrate as migrate_module
from sqljobs import queries
from sqljobs._version import SCHEMA_VERSION
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
    sql: Annotated[bool, typer.Option("--sql", help="Print the SQL instead of running it.")] = False,
) -> None:
    """Install or upgrade the sqljobs schema (the `jobs` schema) in a database."""
    if sql:
        typer.echo(migrate_module.render_sql(), nl=False)
        return
    target = _dsn(dsn)
    with console.status("applying sqljobs migrations"):
        migrate_module.upgrade(target)
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        version = Client(conn).run(queries.schema_version())
    console.print(f"sqljobs schema version {version} is installed")


@app.command()
def version() -> None:
    """Print the client version and the schema version it needs."""
    from importlib.metadata import version as dist_version

    console.print(f"sqljobs {dist_version('sqljobs')} (schema version {SCHEMA_VERSION})")


def main() -> None:
    app()
