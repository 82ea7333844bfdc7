"""Read the SQL source (`sql/*.sql`) as statements, each with the comment above it.

A statement runs from its first token to the `;` that ends it at the top level (outside
strings, quoted identifiers, dollar quotes and comments). Its *contract comment* is the
block of `--` lines right above it (no blank line between), which is how `sql/` states a
function's contract; a revision copies it with the statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FILES = "[0-9][0-9]_*.sql"

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


@dataclass(frozen=True)
class Statement:
    """One top-level statement of a source file."""

    path: Path
    line: int        # where the statement itself starts (1-based)
    comment: str     # the contract comment above it ('' when none), with its newlines
    text: str        # the statement, up to and including its `;`

    @property
    def source(self) -> str:
        """The comment and the statement, as a revision prints them."""
        return (self.comment + self.text) if self.comment else self.text

    @property
    def head(self) -> str:
        """The statement's first words, lower-cased, whitespace folded (for its kind)."""
        return " ".join(self.text.split()[:5]).lower()


def _skip_quoted(sql: str, i: int) -> int:
    """From an opening quote at `i`, the index just past its closing quote."""
    quote = sql[i]
    escapes = quote == "'" and i > 0 and sql[i - 1] in "eE" and (
        i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
    j = i + 1
    while j < len(sql):
        if escapes and sql[j] == "\\":
            j += 2
            continue
        if sql[j] == quote:
            if j + 1 < len(sql) and sql[j + 1] == quote:  # '' or "" inside
                j += 2
                continue
            return j + 1
        j += 1
    raise ValueError(f"unterminated {quote} quote at offset {i}")


def split(sql: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each top-level statement: start at its first token, end
    just past its `;`. Comments and blank space between statements belong to none."""
    spans: list[tuple[int, int]] = []
    i, start = 0, None
    n = len(sql)
    while i < n:
        c = sql[i]
        if c == "-" and sql.startswith("--", i):
            i = sql.find("\n", i)
            i = n if i < 0 else i + 1
            continue
        if c == "/" and sql.startswith("/*", i):
            depth, i = 1, i + 2
            while depth and i < n:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if start is None:
            start = i
        if c in "'\"":
            i = _skip_quoted(sql, i)
            continue
        if c == "$":
            match = _DOLLAR.match(sql, i)
            if match and not (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
                close = sql.find(match.group(0), match.end())
                if close < 0:
                    raise ValueError(f"unterminated dollar quote {match.group(0)} at offset {i}")
                i = close + len(match.group(0))
                continue
        if c == ";":
            spans.append((start, i + 1))
            start = None
        i += 1
    if start is not None and sql[start:].strip():
        raise ValueError(f"a statement at offset {start} has no closing semicolon")
    return spans


def statements(path: Path) -> list[Statement]:
    """The statements of one source file, in order, each with its contract comment."""
    sql = path.read_text(encoding="utf-8")
    found: list[Statement] = []
    for start, end in split(sql):
        line_start = sql.rfind("\n", 0, start) + 1
        above = sql[:line_start].split("\n")[:-1]  # the lines before the statement's line
        block: list[str] = []
        while above and above[-1].lstrip().startswith("--"):
            block.insert(0, above.pop())
        comment = "".join(line + "\n" for line in block)
        found.append(Statement(path, sql.count("\n", 0, start) + 1, comment, sql[start:end]))
    return found


def source_files(root: Path = ROOT) -> list[Path]:
    """`sql/NN_*.sql` in load order."""
    return sorted((root / "sql").glob(SOURCE_FILES))


def source_statements(root: Path = ROOT) -> list[Statement]:
    """Every statement of `sql/`, in load order."""
    return [s for path in source_files(root) for s in statements(path)]
