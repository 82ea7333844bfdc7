"""`manage.py sqljobs ...`: the `sqljobs` command, with the settings' App and database.

    manage.py sqljobs worker --concurrency 20     # = sqljobs worker <SQLJOBS["APP"]> ...
    manage.py sqljobs scheduler
    manage.py sqljobs jobs list --state dead

Every option, signal and exit code is the `sqljobs` command's own (docs/reference/cli.md):
this only fills in the App target of worker, scheduler and relay from SQLJOBS["APP"]
when none is given, and sets $SQLJOBS_DSN to the Django database. `migrate` is refused:
in a Django project the schema belongs to `manage.py migrate`, and so worker, scheduler
and relay refuse a missing or older schema saying to run that (not `sqljobs migrate`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError

# the commands whose first argument is the App they serve
_SERVE_AN_APP = frozenset({"worker", "scheduler", "relay"})


class Command(BaseCommand):
    help = "Run the sqljobs command (worker, scheduler, relay, jobs, ...) on this project."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("arguments", nargs=argparse.REMAINDER,
                            help="what `sqljobs` takes, e.g. worker --concurrency 20")

    def handle(self, *args: Any, **options: Any) -> None:
        run_cli(list(options["arguments"]))

    def run_from_argv(self, argv: list[str]) -> None:
        # Everything after `manage.py sqljobs` is the sqljobs command's, options first
        # included (Django's own parser would refuse them).
        run_from_argv(self, argv[2:])


def run_from_argv(command: BaseCommand, arguments: list[str], prefix: Sequence[str] = ()) -> None:
    """Run `sqljobs <prefix> <arguments>`, less Django's --settings / --pythonpath (which
    manage.py has already applied); a CommandError exits 1 with its message."""
    own: list[str] = []
    skip = False
    for argument in arguments:
        if skip:
            skip = False
        elif argument in ("--settings", "--pythonpath"):
            skip = True
        elif not argument.startswith(("--settings=", "--pythonpath=")):
            own.append(argument)
    try:
        run_cli([*prefix, *own])
    except CommandError as error:
        command.stderr.write(f"CommandError: {error}")
        sys.exit(1)


def run_cli(arguments: list[str]) -> None:
    """Run `sqljobs <arguments>` in this process (it exits with the command's code)."""
    from sqljobs._cli import app as cli
    from sqljobs.contrib.django._settings import database_dsn

    if arguments and arguments[0] == "migrate":
        raise CommandError("the sqljobs schema is installed and upgraded by Django's "
                           "migrations here: run `manage.py migrate`")
    if arguments and arguments[0] in _SERVE_AN_APP and (
            len(arguments) == 1 or arguments[1].startswith("-")):
        from django.conf import settings

        target = getattr(settings, "SQLJOBS", {}).get("APP")
        if not target:
            raise CommandError(f'name the App: manage.py sqljobs {arguments[0]} module:app, '
                               f'or set SQLJOBS = {{"APP": "module:app"}} in the settings')
        arguments.insert(1, str(target))
    if arguments and arguments[0] in _SERVE_AN_APP and not {"--help", "-h"} & set(arguments):
        _refuse_an_unmigrated_schema()
    os.environ["SQLJOBS_DSN"] = database_dsn()
    cli(args=arguments, prog_name="manage.py sqljobs")


def _refuse_an_unmigrated_schema() -> None:
    """The role's own schema check, up front, so its refusal names Django's fix."""
    from django.db import connections

    from sqljobs._client.connection import Client
    from sqljobs._client.database import check_schema
    from sqljobs._client.errors import SchemaError
    from sqljobs.contrib.django._settings import database_alias

    wrapper = connections[database_alias()]
    try:
        wrapper.ensure_connection()
        check_schema(Client(wrapper.connection))
    except SchemaError as error:
        raise CommandError(str(error).replace("sqljobs migrate --dsn <dsn>",
                                              "manage.py migrate")) from None
    finally:
        wrapper.close()  # the role opens its own pools
