"""`manage.py sqljobs_worker [options]`: `manage.py sqljobs worker [options]`."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from sqljobs.contrib.django.management.commands.sqljobs import run_cli, run_from_argv


class Command(BaseCommand):
    help = "Run a sqljobs worker for SQLJOBS['APP'] (the options of `sqljobs worker`)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("arguments", nargs=argparse.REMAINDER,
                            help="what `sqljobs worker` takes, e.g. --concurrency 20")

    def handle(self, *args: Any, **options: Any) -> None:
        run_cli(["worker", *options["arguments"]])

    def run_from_argv(self, argv: list[str]) -> None:
        run_from_argv(self, argv[2:], prefix=["worker"])
