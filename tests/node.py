"""Node.js for the tests that run the examples under examples/ with the `pg` package.

Where `node` and `npm` are missing the Node tests skip, except under CI
(`SQLJOBS_REQUIRE_NODE=1`, set by .ci/run), where a missing Node.js fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

HAVE_NODE = bool(shutil.which("node") and shutil.which("npm"))
REQUIRED = os.environ.get("SQLJOBS_REQUIRE_NODE") == "1"

needs_node = pytest.mark.skipif(not HAVE_NODE and not REQUIRED, reason="needs Node.js and npm")


def install(source: Path, names: list[str], into: Path) -> Path:
    """Copy the example's files into `into` and `npm install` its package.json there."""
    assert HAVE_NODE, "SQLJOBS_REQUIRE_NODE=1 but node or npm is not on PATH"
    for name in names:
        shutil.copy(source / name, into / name)
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                          cwd=into, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return into


def pg_env(dsn: str) -> dict[str, str]:
    """The environment in which node-postgres connects to `dsn` (PG* variables)."""
    info = conninfo_to_dict(dsn)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SQLJOBS_DSN")}
    env.update({"PGHOST": str(info.get("host", "127.0.0.1")),
                "PGPORT": str(info.get("port", 5432)),
                "PGUSER": str(info.get("user", "postgres")),
                "PGDATABASE": str(info["dbname"])})
    if info.get("password"):
        env["PGPASSWORD"] = str(info["password"])
    return env
