"""How every `sqljobs` listing prints: a Rich table on a terminal, tab-separated text
elsewhere, one JSON document with `--json`; and the exit codes scripts rely on.

On a terminal a listing is a Rich table sized to the window. When stdout is not a
terminal (a pipe, a file, a CI log) nothing is cut to the width: each table is a header
row then one row per line, columns separated by a tab, a title as a `# title` line
before it, tables apart by a blank line. Cells are raw text (never Rich markup), so
"[redacted]" prints as it is. A `Block` (a traceback) prints as its own lines under its
`# title`, never flattened into a cell. `--json` prints one JSON document per command: an object
whose keys name its lists (`{"jobs": [...], "next_after_id": ...}`).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from sqljobs._cli.common import console

# Exit codes (docs/reference/cli.md "Exit codes"): the same for every command.
OK = 0
REFUSED = 1  # the database refused: a coded SQL error (SQLSTATE and message on stderr)
USAGE = 2  # bad usage: an unknown option or value, an app that cannot load, no database
NOT_CONFIRMED = 3  # a filter action without --yes: stdin not a terminal, or answered no
NOT_FOUND = 4  # `jobs show` of an id no job has, `tenants unbind` of a role bound to none
PENDING = 5  # `backfills --pending` found declared backfills not completed in the environment
UNMAPPED = 6  # `subjects check` found job types with personal data and no subject mapping

JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document (for scripts: see docs/howto-cli-scripts.md).")]


def is_terminal() -> bool:
    """Whether stdout is a terminal: read at each call (CliRunner swaps sys.stdout)."""
    return sys.stdout.isatty()


def _finite(value: Any) -> Any:
    """inf/nan are not JSON: they become null (retention's inf reads "forever")."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def emit_json(value: Any) -> None:
    """One JSON document on stdout: keys sorted, datetimes as ISO text, no NaN/Infinity."""
    typer.echo(json.dumps(_finite(value), indent=2, sort_keys=True, default=str,
                          allow_nan=False))


def say(text: str) -> None:
    """One line for people on stdout, never wrapped nor read as markup."""
    typer.echo(text)


def one_line(text: str, limit: int) -> str:
    """A cell on one line; cut at limit characters only on a terminal."""
    flat = " ".join(str(text).split())
    if is_terminal() and len(flat) > limit:
        return flat[: limit - 1] + "…"
    return flat


class Listing:
    """A table of text cells, printed for a terminal or for a pipe (see the module)."""

    def __init__(self, *columns: str, title: str | None = None, header: bool = True) -> None:
        self.columns = columns
        self.title = title
        self.header = header
        self.rows: list[list[str]] = []

    def add_row(self, *cells: object) -> None:
        self.rows.append(["" if cell is None else str(cell) for cell in cells])

    def _rich(self) -> Table:
        if not self.header:
            grid = Table.grid(padding=(0, 2))
            for _ in self.columns:
                grid.add_column()
            for row in self.rows:
                grid.add_row(Text(row[0], style="bold"), *(Text(cell) for cell in row[1:]))
            return grid
        table = Table(*self.columns, title=self.title)
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))
        return table

    def _plain(self) -> str:
        def line(cells: list[str] | tuple[str, ...]) -> str:
            return "\t".join(" ".join(cell.split()) for cell in cells)

        lines = [f"# {self.title}"] if self.title else []
        if self.header:
            lines.append(line(self.columns))
        lines.extend(line(row) for row in self.rows)
        return "\n".join(lines)


class Block:
    """A titled text printed as its lines: a traceback keeps its newlines and indents."""

    def __init__(self, title: str, text: str) -> None:
        self.title = title
        self.text = text

    def _rich(self) -> Group:
        return Group(Text(self.title, style="bold"), Text(self.text.rstrip("\n")))

    def _plain(self) -> str:
        return f"# {' '.join(self.title.split())}\n" + self.text.rstrip("\n")


def show(*listings: Listing | Block | None) -> None:
    """Print the listings and blocks given (None skipped), one after another."""
    present = [listing for listing in listings if listing is not None]
    if is_terminal():
        for listing in present:
            console.print(listing._rich())
        return
    typer.echo("\n\n".join(listing._plain() for listing in present))
