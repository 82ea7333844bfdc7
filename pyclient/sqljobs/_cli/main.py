"""The `sqljobs` command: every command group, assembled in the order `--help` lists them.

Typer gives typed options and `--help` from the function signatures; Rich prints
tables and progress (Typer uses it for its own help and errors too).
"""

from __future__ import annotations

from typing import Any

import typer
import typer.core

from sqljobs._cli import demo, install, metrics, operate, retention, roles
from sqljobs._cli.backfills import backfills_app
from sqljobs._cli.common import CommandLine
from sqljobs._cli.dashboard import dashboard
from sqljobs._cli.describe import describe
from sqljobs._cli.dev import dev_app
from sqljobs._cli.enqueue import enqueue
from sqljobs._cli.limits import leases, limits_app
from sqljobs._cli.schedules import schedules_app
from sqljobs._cli.subjects import subjects_app
from sqljobs._cli.tenants import tenants_app
from sqljobs._cli.webhooks import webhooks_app

_display_type = typer.core.TyperOption.display_type_rich


def _flag_type_hidden(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """Typer labels every flag (`--help`, `--json`) `<bool>` although a flag takes no value."""
    return None if self.is_flag else _display_type(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_type_hidden  # type: ignore[method-assign]


def _print_version(value: bool) -> None:
    if value:
        install.version()
        raise typer.Exit()


app = typer.Typer(
    name="sqljobs",
    cls=CommandLine,  # refuses an argument that is not valid UTF-8, whatever the command
    help="Durable jobs with PostgreSQL as the engine.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the client version and the schema version it needs, and exit.",
    ),
) -> None:
    """Durable jobs with PostgreSQL as the engine."""

app.command()(install.migrate)
app.command()(install.version)
app.command()(enqueue)
app.command()(roles.worker)
app.command()(operate.workers)
app.command()(demo.demo)
app.command()(roles.relay)
app.command()(roles.scheduler)
app.add_typer(schedules_app, name="schedules")
app.add_typer(dev_app, name="dev")
app.add_typer(operate.jobs_app, name="jobs")
app.add_typer(operate.queues_app, name="queues")
app.command()(describe)
app.add_typer(limits_app, name="limits")
app.command()(leases)
app.command()(metrics.metrics)
app.command()(metrics.stats)
app.command()(dashboard)
app.command()(retention.purge)
app.add_typer(retention.retention_app, name="retention")
app.add_typer(tenants_app, name="tenants")
app.add_typer(backfills_app, name="backfills")
app.add_typer(subjects_app, name="subjects")
app.add_typer(webhooks_app, name="webhooks")


def main() -> None:
    app()
