"""`sqljobs migrate` and `sqljobs version`: the schema and the versions."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer

from sqljobs._cli.common import DsnOption, console, database_errors, dsn_of
from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._client.errors import translate
from sqljobs._schema.distributed import DEFAULT_SHARD_COUNT
from sqljobs._version import SCHEMA_VERSION


def migrate(
    dsn: DsnOption = None,
    sql: Annotated[bool, typer.Option(help="Print the SQL instead of running it.")] = False,
    distributed: Annotated[bool, typer.Option(
        help="Then distribute the queue tables over the Citus cluster this coordinator "
             "leads, a preview (docs/howto-citus.md, Distributed mode); idempotent.")] = False,
    shard_count: Annotated[int, typer.Option(
        min=1, help="With --distributed: the shards of the distributed tables, the "
                    "first time.")] = DEFAULT_SHARD_COUNT,
) -> None:
    """Install or upgrade the sqljobs schema (the `jobs` schema) in a database."""
    # Alembic and SQLAlchemy load here, not with the CLI: they were about 40% of its start-up,
    # and a worker's restart (its jobs wait for it when it was the one that may run them)
    # needs neither.
    import sqlalchemy.exc

    from sqljobs._schema import distributed as distributed_module
    from sqljobs._schema import migrate as migrate_module

    if sql:
        typer.echo(migrate_module.render_sql(), nl=False)
        if distributed:
            typer.echo(distributed_module.render_sql(shard_count), nl=False)
        return
    target = dsn_of(dsn)
    with database_errors(), console.status("applying sqljobs migrations"):
        try:
            migrate_module.upgrade(target)
        except sqlalchemy.exc.DBAPIError as error:  # a coded refusal (SJ060) reads as ours
            if isinstance(error.orig, psycopg.Error):
                raise translate(error.orig) from error
            raise
    with database_errors(), psycopg.connect(target, autocommit=True) as conn:
        # an install distributed earlier gets the distributing step's refresh too: a
        # revision's new functions must reach every node and run in rounds
        if distributed or distributed_module.is_distributed(conn):
            with console.status("distributing the queue's tables"):
                try:
                    distributed_module.distribute(conn, shard_count)
                except psycopg.Error as error:
                    raise translate(error) from error
            console.print("the queue's tables are distributed over the Citus cluster")
        version = Client(conn).run(queries.schema_version())
    console.print(f"sqljobs schema version {version} is installed")


def version() -> None:
    """Print the client version and the schema version it needs."""
    from importlib.metadata import version as dist_version

    console.print(f"sqljobs {dist_version('sqljobs')} (schema version {SCHEMA_VERSION})")
