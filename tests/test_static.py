"""No production statement reads or returns a whole row (docs/reference/sql.md, the rules).

Scans the SQL in `sql/` and the SQL in string literals under `pyclient/` for
`select *`, `returning *` and `alias.*` (e.g. `select j.*`, `returning j.*`, `(t).*`),
case-insensitive, outside comments (SQL `--` and `/* */`; Python comments and docstrings
are not code). A self-check proves the scanner catches what it must.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [ROOT / "sql", ROOT / "pyclient"]

WHOLE_ROW = [
    (re.compile(r"\bselect\s+(?:all\s+|distinct\s+(?:on\s*\([^)]*\)\s*)?)?\*", re.I),
     "select *"),
    (re.compile(r"\breturning\s+\*", re.I), "returning *"),
    (re.compile(r"(?:\b[a-z_][a-z0-9_$]*|\"[^\"]+\"|\))\s*\.\s*\*", re.I), "alias.*"),
]
SQL_WORD = re.compile(r"\b(select|returning)\b", re.I)

# Statements over an application's OWN query, not over a sqljobs table: the whole row is
# what the application's query names, and the handler is meant to get all of it.
APP_QUERY_WRAPPERS = {
    # a backfill's page: `source` is the app's declared query (sqljobs._app.backfills)
    "select * from ({source}) as sqljobs_page{after} order by {keys} limit {limit}",
    # a rollup's source, read for its column names only (sqljobs._app.maintenance)
    "select * from ({source}) as sqljobs_rollup limit 0",
    # an export's page, of the app's declared query (sqljobs._app.transfer)
    "select * from ({source}) as sqljobs_export{where} order by {keys} limit {limit}",
}


def strip_sql_comments(text: str) -> str:
    """SQL without `--` and (nested) `/* */` comments; quoted text is kept as is."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        two = text[i:i + 2]
        if two == "--":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif two == "/*":
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif text[i] in "'\"":
            quote, j = text[i], i + 1
            while j < n:
                if text[j] == quote:
                    if text[j + 1:j + 2] == quote:  # doubled quote inside the literal
                        j += 2
                        continue
                    break
                j += 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


SINGLE_QUOTED = re.compile(r"'(?:[^']|'')*'")


def whole_row_uses(sql: str) -> list[str]:
    """The whole-row constructs in `sql` (comments ignored), as short excerpts.

    Text in single quotes is prose unless it reads as SQL (`execute 'select ...'`); then it
    is scanned as SQL too. Dollar-quoted bodies are code.
    """
    code = strip_sql_comments(sql)
    outside = SINGLE_QUOTED.sub("''", code)
    found = []
    for pattern, label in WHOLE_ROW:
        for match in pattern.finditer(outside):
            start = max(outside.rfind("\n", 0, match.start()) + 1, match.start() - 40)
            found.append(f"{label}: {outside[start:match.end()].strip()}")
    for literal in SINGLE_QUOTED.findall(code):
        text = literal[1:-1].replace("''", "'")
        if SQL_WORD.search(text):
            found += whole_row_uses(text)
    return found


def python_sql_strings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal in Python source that reads as SQL.

    Docstrings are prose, not code; strings without `select` or `returning` are not SQL.
    """
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and SQL_WORD.search(node.value)):
            yield node.lineno, node.value


def scan_file(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        return [f"{path.name}: {use}" for use in whole_row_uses(text)]
    return [f"{path.name}:{line}: {use}" for line, sql in python_sql_strings(text)
            if sql not in APP_QUERY_WRAPPERS for use in whole_row_uses(sql)]


def production_files() -> list[Path]:
    files: dict[Path, Path] = {}
    for root in SCANNED:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".sql", ".py") and path.is_file():
                files.setdefault(path.resolve(), path)  # pyclient/sqljobs/_sql links to sql/
    return sorted(files.values())


def test_no_production_statement_uses_whole_rows() -> None:
    files = production_files()
    assert any(p.suffix == ".sql" for p in files) and any(p.suffix == ".py" for p in files)
    problems = [problem for path in files for problem in scan_file(path)]
    assert not problems, "whole-row reads or returns:\n" + "\n".join(problems)


# -- self-check: the scanner finds what it must and nothing else -----------------------------

@pytest.mark.parametrize("sql", [
    "select * from jobs.job",
    "SELECT\n   *\n  FROM jobs.job",
    "select distinct * from jobs.job",
    "insert into jobs.job (id) values (1) returning *",
    "update jobs.job set state = 'ready' RETURNING *",
    "select j.* from jobs.job j",
    "select j.id, q.* from jobs.job j join jobs.queue q on q.name = j.queue",
    "delete from jobs.job j returning j.*",
    "select (jobs.claim('{q}', 'w')).*",
    "return query select * from jobs.claim('{q}', 'w'); -- trailing comment",
    "execute 'select * from jobs.job'",
])
def test_scanner_catches_whole_rows(sql: str) -> None:
    assert whole_row_uses(sql), sql


@pytest.mark.parametrize("sql", [
    "select j.id, j.name from jobs.job j",
    "select pg_catalog.count(*) from jobs.job",
    "select count(*) filter (where state = 'ready') from jobs.job",
    "-- select * from jobs.job\nselect 1",
    "/* select * from jobs.job /* nested */ returning * */ select 1",
    "select '--', j.id from jobs.job j returning j.id",
    "select 2 * 3, a*b from t",
    "comment on table jobs.job is 'Private storage; use the jobs.* functions.'",
])
def test_scanner_ignores_what_is_not_a_whole_row(sql: str) -> None:
    assert not whole_row_uses(sql), sql


def test_scanner_reads_python_code_strings_but_not_comments_or_docstrings() -> None:
    source = '''
"""Module docstring: never select * from anything."""

# select * from jobs.job (a comment)


def fetch():
    """Docstring: returning * is banned."""
    return "select j.* from jobs.job j"


def fine():
    return "select j.id from jobs.job j"
'''
    strings = [text for _, text in python_sql_strings(source)]
    assert strings == ["select j.* from jobs.job j", "select j.id from jobs.job j"]
    assert [use for text in strings for use in whole_row_uses(text)] == [
        "alias.*: select j.*"]


def test_a_new_whole_row_statement_fails_the_scan(tmp_path: Path) -> None:
    added = tmp_path / "95_new.sql"
    added.write_text("create function jobs.f() returns setof jobs.job language sql\n"
                     "as $$ select * from jobs.job $$;\n")
    assert scan_file(added) == ["95_new.sql: select *: as $$ select *"]
