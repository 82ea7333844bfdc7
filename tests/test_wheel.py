"""The built wheel carries the SQL: a non-editable install can install the schema.

Builds the wheel from this checkout, installs it into a new virtualenv outside the
checkout, and runs that virtualenv's `sqljobs migrate --dsn` against an empty database.

The new virtualenv gets its dependencies from the test interpreter's site-packages
through a `.pth` line (so the test needs no network) and the wheel itself with
`--no-deps`. A `.pth` line adds a directory without running the `.pth` files inside it,
so the editable install of the checkout stays out of reach; the test checks that the
`sqljobs` it runs is the wheel's.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import psycopg
import pytest

from sqljobs._version import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

REQUIRED_FILES = [
    "sqljobs/__init__.py",
    "sqljobs/py.typed",
    "sqljobs/_migrations/env.py",
    "sqljobs/_migrations/versions/0001_install.py",
    "sqljobs/_migrations/versions/0001_install.sql",
    "sqljobs/testing/__init__.py",  # the pytest plugin (`-p sqljobs.testing`)
    "sqljobs/contrib/django/migrations/0001_schema_v1.py",  # what `migrate` finds
    "sqljobs/contrib/django/management/commands/sqljobs.py",
]


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out


def build_wheel(outdir: Path) -> Path:
    """`python -m build --wheel`; without build isolation when that cannot fetch hatchling."""
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(ROOT)]
    out = subprocess.run(command, cwd=outdir, capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and importlib.util.find_spec("hatchling") is not None:
        out = subprocess.run([*command, "--no-isolation"], cwd=outdir, capture_output=True,
                             text=True, timeout=600)
    assert out.returncode == 0, f"building the wheel failed:\n{out.stdout}\n{out.stderr}"
    wheels = sorted(outdir.glob("sqljobs-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


def test_wheel_carries_every_revision(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in REQUIRED_FILES if name not in names]
    assert not missing, f"the wheel lacks {missing}"
    in_checkout = {p.name for p in (ROOT / "migrations" / "versions").glob("[0-9]*")}
    in_wheel = {Path(n).name for n in names if n.startswith("sqljobs/_migrations/versions/")}
    assert in_checkout and in_checkout <= in_wheel
    assert not [n for n in names if n.startswith(("tests/", "sqltests/", "bench/"))]


def test_installed_wheel_migrates_an_empty_database(wheel: Path, empty_db: str,
                                                    tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                  cwd=tmp_path).stdout.strip()
    # The test interpreter's packages (psycopg, alembic, ...) as plain path entries.
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(purelib, "_sqljobs_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SQLJOBS_DSN", "DATABASE_URL", "VIRTUAL_ENV")}
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    where = run([str(python), "-c", "import sqljobs; print(sqljobs.__file__)"],
                cwd=tmp_path, env=env).stdout.strip()
    assert Path(where).is_relative_to(env_dir), f"imported sqljobs from {where}, not the wheel"

    out = run([str(env_dir / "bin" / "sqljobs"), "migrate", "--dsn", empty_db],
              cwd=tmp_path, env=env)
    assert f"schema version {SCHEMA_VERSION}" in out.stdout
    with psycopg.connect(empty_db) as conn:
        row = conn.execute("select jobs.schema_version()").fetchone()
    assert row == (SCHEMA_VERSION,)


def test_the_license_pyproject_names_is_in_the_repository() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert project["license"] == "MIT" and license_text.startswith("MIT License")
