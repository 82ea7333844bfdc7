"""The release pipeline's artifacts are what their tools write, and released surfaces hold.

- The unreleased revision is exactly what `make revision` writes from `sql/` and its
  preamble, and upgrading the previous version with it installs what `sql/` installs.
- `make revision NAME=<slug>` starts the next revision (on a copy of the tree): its
  preamble stub, its Alembic script and the version bumps, and it leaves out a function
  that differs from the previous schema only by SECURITY DEFINER.
- `sql/catalog.snapshot` is what `sql/` installs (`make snapshot`).
- Every function identity of every released revision (its arguments and its result,
  columns included) exists unchanged at head, unless `migrations/versions/RETIRED`
  retires it with the release that announced it. The result columns are the OUT /
  RETURNS TABLE parameters, or the attributes of the composite type (a table's or view's
  row, `setof jobs.job_view`) it returns: a released column may not disappear, move or
  change type; new ones may be appended. A trigger function is no one's to call
  (PostgreSQL refuses any call outside its trigger), so it is not surface: it goes with
  its trigger.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tools import revision as tool
from tools.snapshot import SNAPSHOT, snapshot
from tools.sqlsource import ROOT

RETIRED = ROOT / "migrations" / "versions" / "RETIRED"
# signature -> (result type, result columns "name type", in order)
IDENTITIES = """
select p.oid::pg_catalog.regprocedure::text,
       case when p.proretset then 'SETOF ' else '' end
         || pg_catalog.format_type(p.prorettype, null),
       coalesce(
         (select pg_catalog.array_agg(a.name || ' ' || pg_catalog.format_type(a.type, null)
                                      order by a.n)
            from unnest(p.proargnames, p.proallargtypes, p.proargmodes)
                 with ordinality a(name, type, mode, n)
           where a.mode in ('o', 'b', 't')),
         (select pg_catalog.array_agg(c.attname || ' '
                                      || pg_catalog.format_type(c.atttypid, c.atttypmod)
                                      order by c.attnum)
            from pg_catalog.pg_type t
            join pg_catalog.pg_attribute c on c.attrelid = t.typrelid
           where t.oid = p.prorettype and t.typrelid <> 0
             and c.attnum > 0 and not c.attisdropped),
         '{}')
  from pg_catalog.pg_proc p
 where p.pronamespace = 'jobs'::pg_catalog.regnamespace
"""
Identity = tuple[str, list[str]]


def identities(dsn: str) -> dict[str, Identity]:
    with psycopg.connect(dsn) as conn:
        return {signature: (result, columns)
                for signature, result, columns in conn.execute(IDENTITIES).fetchall()}


def kept(then: Identity, now: Identity | None) -> bool:
    """`now` still serves a caller of `then`: the same result type, and the same columns
    first (a caller never sees a column go, move or change type; one appended is new)."""
    return now is not None and now[0] == then[0] and now[1][:len(then[1])] == then[1]


def unreleased() -> list[tool.Revision]:
    released = tool.released()
    return [r for r in tool.revisions() if r.path.name not in released]


@pytest.mark.parametrize("revision", unreleased(), ids=lambda r: r.stem)
def test_the_unreleased_revision_is_what_make_revision_writes(pg_admin_dsn: str,
                                                              revision: tool.Revision) -> None:
    text, lacking = tool.build(revision, pg_admin_dsn)
    assert not lacking, "the upgrade lacks DDL (add it to the preamble):\n" + "\n".join(lacking)
    assert revision.path.read_text(encoding="utf-8") == text, (
        f"{revision.path.name} is not what `make revision` writes: never edit it by hand; "
        "edit sql/ or its preamble and run `make revision`")


def test_only_the_newest_revision_may_be_unreleased() -> None:
    assert [r.version for r in unreleased()] in ([], [tool.revisions()[-1].version])


def test_make_revision_name_starts_the_next_revision_from_sql(pg_admin_dsn: str,
                                                              tmp_path: Path) -> None:
    # a copy of what the tool reads and writes, with the newest revision released
    for part in ("sql", "migrations/versions"):
        shutil.copytree(ROOT / part, tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / tool.VERSION_FILE).parent.mkdir(parents=True)
    shutil.copy(ROOT / tool.VERSION_FILE, tmp_path / tool.VERSION_FILE)
    newest = tool.revisions()[-1]
    if newest.path.name not in tool.released():
        with (tmp_path / tool.RELEASED).open("a", encoding="utf-8") as released:
            released.write(f"{newest.path.name}  (sha256)  9.9.9\n")
    # only an attribute install_roles() sets anyway: not a change a revision repeats
    schema = tmp_path / tool.SCHEMA_FILE
    floor = "create or replace function jobs.schema_floor()\nreturns integer\n"
    assert schema.read_text().count(floor) == 1
    schema.write_text(schema.read_text().replace(floor, floor + "security definer\n"))
    ours = {path: (ROOT / path).read_bytes() for path in (tool.VERSION_FILE, tool.SCHEMA_FILE)}

    out = subprocess.run([sys.executable, "-m", "tools.revision", "--dsn", pg_admin_dsn,
                          "--root", str(tmp_path), "--name", "next_step"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)

    assert out.returncode == 0, out.stdout + out.stderr
    new = tool.Revision(newest.version + 1, "next_step", tmp_path)
    assert tool.revisions(tmp_path)[-1] == new
    number = f"{new.version:04d}"
    assert new.preamble.read_text().startswith(
        f"-- sqljobs schema version {new.version} (next step): upgrades version "
        f"{newest.version} in place.\n-- Revision sqljobs_{number}.")
    text = new.path.read_text()
    preamble, generated = text.split(tool.GENERATED_BANNER)
    assert preamble == new.preamble.read_text()
    # the version bump is the one function that changed: its sql/ text, contract comment
    # and all; the function that only gained SECURITY DEFINER is not repeated
    assert "-- Version. Bump with each schema change" in generated
    assert f"as $$ select {new.version} $$;" in generated
    assert "jobs.schema_floor" not in generated
    assert generated.rstrip().endswith("select jobs.install_roles();")
    script = new.path.with_suffix(".py").read_text()
    assert f'revision = "sqljobs_{number}"' in script
    assert f'down_revision = "sqljobs_{newest.version:04d}"' in script
    assert f"apply(op, {new.version})" in script
    version_file = (tmp_path / tool.VERSION_FILE).read_text()
    assert f"SCHEMA_VERSION = {new.version}\n" in version_file
    assert f'SCHEMA_REVISION = "sqljobs_{number}"' in version_file
    schema_text = schema.read_text()
    assert f"immutable\nset search_path = ''\nas $$ select {new.version} $$;" in schema_text
    assert "as $$ select 1 $$;" in schema_text  # the floor is not a version to bump
    assert {path: (ROOT / path).read_bytes() for path in ours} == ours  # this tree untouched


def test_the_catalog_snapshot_is_what_sql_installs(pg_admin_dsn: str) -> None:
    assert SNAPSHOT.read_text(encoding="utf-8") == snapshot(pg_admin_dsn), (
        "sql/catalog.snapshot is stale: run `make snapshot` and review its diff")


def retired() -> dict[str, str]:
    """signature -> the release that announced its retirement."""
    found: dict[str, str] = {}
    for line in RETIRED.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            signature, release = line.rsplit(maxsplit=1)
            found[signature.strip()] = release
    return found


@pytest.fixture(scope="module")
def head_identities(pg_admin_dsn: str) -> Iterator[dict[str, Identity]]:
    with tool.scratch(pg_admin_dsn, "head") as dsn:
        tool.install_chain(dsn, len(tool.revisions()))
        yield identities(dsn)


@pytest.mark.parametrize("revision", [r for r in tool.revisions()
                                      if r.path.name in tool.released()], ids=lambda r: r.stem)
def test_a_released_surface_exists_unchanged_at_head(pg_admin_dsn: str, revision: tool.Revision,
                                                     head_identities: dict[str, Identity]
                                                     ) -> None:
    with tool.scratch(pg_admin_dsn, "released") as dsn:
        tool.install_chain(dsn, revision.version)
        then = identities(dsn)
    gone = retired()
    broken = [f"{signature}: {result} -> {head_identities.get(signature, 'missing')}"
              for signature, result in sorted(then.items())
              if not kept(result, head_identities.get(signature)) and signature not in gone
              and result[0] != "trigger"]
    assert not broken, (f"released in {revision.path.name}, changed or dropped at head "
                        "(a new signature gets a new name; retire the old one in RETIRED, "
                        "with the release announcing it, before dropping it):\n"
                        + "\n".join(broken))


def test_retired_functions_name_a_release(head_identities: dict[str, Identity]) -> None:
    for signature, release in retired().items():
        assert release.count(".") == 2, (signature, release)


def test_result_columns_are_part_of_the_identity(head_identities: dict[str, Identity]
                                                 ) -> None:
    """OUT parameters, RETURNS TABLE and a returned row type all show their columns."""
    by_name = {signature.split("(")[0]: identity
               for signature, identity in head_identities.items()}
    for name in ("jobs.event_locks", "jobs.backfill_row"):
        assert by_name[name][1], f"{name}: no result columns read"
    views = [identity for identity in head_identities.values()
             if identity[0] == "SETOF jobs.job_view"]
    assert views and all(columns and columns[0].startswith("id ") for _, columns in views)
    then = ("SETOF record", ["id bigint", "state text"])
    assert kept(then, ("SETOF record", ["id bigint", "state text", "extra integer"]))
    assert not kept(then, ("SETOF record", ["id bigint"]))
    assert not kept(then, ("SETOF record", ["id bigint", "state integer"]))
    assert not kept(then, ("SETOF record", ["state text", "id bigint"]))
    assert not kept(then, ("record", ["id bigint", "state text"]))


def test_the_revision_tool_splits_sql_like_postgresql(tmp_path: Path) -> None:
    from tools.sqlsource import statements

    source = tmp_path / "01_x.sql"
    source.write_text(
        "-- header\n\n-- f: its contract\n-- (two lines)\ncreate function f() returns text"
        " language sql as $b$ select ';' || $$;$$ $b$;\n"
        "select E'it\\'s; fine', 'a''b;', \"odd;name\" /* ; */ from t; -- tail ;\n")
    found = statements(source)
    assert [s.comment for s in found] == ["-- f: its contract\n-- (two lines)\n", ""]
    assert found[0].text.endswith("$b$;") and found[1].text.endswith("from t;")
