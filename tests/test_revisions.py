"""The release pipeline's artifacts are what their tools write, and released surfaces hold.

- The unreleased revision is exactly what `make revision` writes from `sql/` and its
  preamble, and upgrading the previous version with it installs what `sql/` installs.
- `sql/catalog.snapshot` is what `sql/` installs (`make snapshot`).
- Every function identity of every released revision (its arguments and its result,
  columns included) exists unchanged at head, unless `migrations/versions/RETIRED`
  retires it with the release that announced it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tools import revision as tool
from tools.snapshot import SNAPSHOT, snapshot
from tools.sqlsource import ROOT

RETIRED = ROOT / "migrations" / "versions" / "RETIRED"
IDENTITIES = ("select p.oid::regprocedure::text, pg_catalog.pg_get_function_result(p.oid) "
              "from pg_catalog.pg_proc p where p.pronamespace = 'jobs'::regnamespace")


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
def head_identities(pg_admin_dsn: str) -> Iterator[dict[str, str]]:
    with tool.scratch(pg_admin_dsn, "head") as dsn:
        tool.install_chain(dsn, len(tool.revisions()))
        with psycopg.connect(dsn) as conn:
            yield dict(conn.execute(IDENTITIES).fetchall())


@pytest.mark.parametrize("revision", [r for r in tool.revisions()
                                      if r.path.name in tool.released()], ids=lambda r: r.stem)
def test_a_released_surface_exists_unchanged_at_head(pg_admin_dsn: str, revision: tool.Revision,
                                                     head_identities: dict[str, str]) -> None:
    with tool.scratch(pg_admin_dsn, "released") as dsn:
        tool.install_chain(dsn, revision.version)
        with psycopg.connect(dsn) as conn:
            then = dict(conn.execute(IDENTITIES).fetchall())
    gone = retired()
    broken = [f"{signature}: {result} -> {head_identities.get(signature, 'missing')}"
              for signature, result in sorted(then.items())
              if head_identities.get(signature) != result and signature not in gone]
    assert not broken, (f"released in {revision.path.name}, changed or dropped at head "
                        "(a new signature gets a new name; retire the old one in RETIRED, "
                        "with the release announcing it, before dropping it):\n"
                        + "\n".join(broken))


def test_retired_functions_name_a_release(head_identities: dict[str, str]) -> None:
    for signature, release in retired().items():
        assert release.count(".") == 2, (signature, release)


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
