"""The command line, on top of every other layer (`sqljobs ...`; see `main.py`)."""

from sqljobs._cli.main import app, main

__all__ = ["app", "main"]
