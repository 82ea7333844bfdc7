"""No SQL statement in sql/ or pyclient/ is built by pasting caller input into its text.

- sql/: every dynamic `execute` runs `pg_catalog.format()` of a literal template whose
  placeholders are only %I and %L (quoted identifiers and literals), with no `||` in the
  statement, unless its function is one of DYNAMIC_FROM_CATALOG: functions without
  arguments (no caller can hand them text) that build DDL from the catalogs at install
  time. (`format()` with %s elsewhere writes error messages, which are never executed.)
- pyclient/: the statement given to psycopg (`execute`, `executemany`, `Call(...)`,
  `sql.SQL(...)`) is a string literal, a `+` of literals and UPPER_CASE module constants,
  or a psycopg `sql` composition; never an f-string, a `%` of strings, a `+` with any
  other value, or a `.format()` call.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# function -> why its dynamic SQL cannot carry caller input
DYNAMIC_FROM_CATALOG = {
    "jobs.define_spec": "writes jobs.job_spec and the spec functions from jobs.job's columns",
    "jobs.install_roles": "constant role names; function names read from pg_proc as regprocedure",
}

FUNCTION = re.compile(
    r"create or replace function\s+([a-z_.]+)\s*\((.*?)\)\s*returns.*?\bas\s+(\$[a-z_]*\$)(.*?)\3",
    re.S | re.I)
EXECUTE = re.compile(r"\bexecute\s+(?!function\b)(.*?);", re.S | re.I)
FORMAT_TEMPLATE = re.compile(r"^pg_catalog\.format\(\s*'((?:[^']|'')*)'", re.S)


def sql_functions() -> list[tuple[str, str, str, str]]:
    found = []
    for path in sorted((ROOT / "sql").glob("[0-9][0-9]_*.sql")):
        for match in FUNCTION.finditer(path.read_text()):
            found.append((path.name, match.group(1), match.group(2).strip(), match.group(4)))
    return found


def unsafe_execute(statement: str) -> str | None:
    """Why this `execute` statement could paste caller input, or None."""
    template = FORMAT_TEMPLATE.match(statement.strip())
    if template is None:
        return "not a pg_catalog.format() of a literal template"
    if "||" in statement:
        return "concatenates with ||"
    placeholders = set(re.findall(r"%(?:\d+\$)?-?\d*([a-zA-Z%])", template.group(1)))
    if placeholders - {"I", "L", "%"}:
        return f"format placeholders {sorted(placeholders - {'I', 'L', '%'})} (only %I and %L)"
    return None


def test_the_scan_finds_the_functions() -> None:
    names = {name for _, name, _, _ in sql_functions()}
    assert {"jobs.enqueue", "jobs.claim", "jobs.define_spec", "jobs.install_roles"} <= names
    assert len(names) > 100


def test_dynamic_sql_in_sql_only_quotes_its_values() -> None:
    problems = []
    for file, name, arguments, body in sql_functions():
        for statement in EXECUTE.findall(body):
            if name in DYNAMIC_FROM_CATALOG:
                if arguments:
                    problems.append(f"{file}: {name} takes arguments yet builds SQL")
                continue
            if why := unsafe_execute(statement):
                problems.append(f"{file}: {name}: {why}: execute {statement.strip()[:80]}")
    assert not problems, "\n".join(problems)


def test_the_check_refuses_what_it_should() -> None:
    assert unsafe_execute("'select ' || p_name") is not None
    assert unsafe_execute("pg_catalog.format('select %s', p_name)") is not None
    assert unsafe_execute("pg_catalog.format('select %L', p_name) || ';'") is not None
    assert unsafe_execute("pg_catalog.format('drop role %I', p_name)") is None


STATEMENT_TAKERS = {"execute", "executemany", "Call", "SQL"}


def constant(node: ast.expr) -> bool:
    """A string literal, or a module constant (an UPPER_CASE name): never caller input."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return constant(node.left) and constant(node.right)
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return bool(re.fullmatch(r"_?[A-Z][A-Z0-9_]*", name))


def pasted(node: ast.expr) -> bool:
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(part, ast.FormattedValue) for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return not constant(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format" and isinstance(node.func.value, ast.Constant))


def python_problems(source: str, label: str) -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in STATEMENT_TAKERS and pasted(node.args[0]):
            problems.append(f"{label}:{node.lineno}: {name}() of a pasted string")
    return problems


def test_the_python_client_never_pastes_into_statements() -> None:
    problems = []
    for path in sorted((ROOT / "pyclient").rglob("*.py")):
        problems += python_problems(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_python_check_refuses_what_it_should() -> None:
    assert python_problems('cur.execute(f"select {x}")', "t")
    assert python_problems('cur.execute("select " + x)', "t")
    assert python_problems('Call("select %s" % x, ())', "t")
    assert python_problems('sql.SQL("select {}".format(x))', "t")
    assert python_problems('conn.execute("listen " + self._channel)', "t")
    assert not python_problems('Call("select " + _COLUMNS + " from jobs.f()", ())', "t")
    assert not python_problems('cur.execute("select %s", (x,))', "t")
    assert not python_problems('cur.execute(sql.SQL("select {}").format(sql.Identifier(x)))', "t")
