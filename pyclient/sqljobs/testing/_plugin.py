"""The pytest plugin: fixtures giving each test a migrated database of its own.

Opt-in: installing sqljobs changes nobody's test run. Enable it with
`pytest -p sqljobs.testing`, or in a conftest.py: `pytest_plugins = ["sqljobs.testing"]`.

    sqljobs_server   (session)  DSN of the administrative database the kit works on
                                ($SQLJOBS_TEST_DSN, the `sqljobs_test_dsn` ini option,
                                else a private embedded server)
    sqljobs_template (session)  the migrated template, made once per session
    sqljobs_db       (test)     a TestDatabase: a fresh clone, $SQLJOBS_DSN pointing at it,
                                its clock; dropped after the test
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sqljobs.testing._database import Template, database_dsn
from sqljobs.testing._fixture import TestDatabase
from sqljobs.testing._server import DSN_OPTION, admin_server


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(DSN_OPTION, "DSN of a PostgreSQL administrative database where the sqljobs "
                  "testing kit may create databases ($SQLJOBS_TEST_DSN wins; default: a "
                  "private embedded server)")


@pytest.fixture(scope="session")
def sqljobs_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of the administrative database the kit creates its databases on."""
    configured = request.config.getini(DSN_OPTION) or None
    cache = getattr(request.config, "cache", None)
    data_root = (cache.mkdir("sqljobs-testing") if cache is not None
                 else Path(request.config.rootpath) / ".sqljobs-testing")
    with admin_server(configured, Path(data_root)) as dsn:
        yield dsn


@pytest.fixture(scope="session")
def sqljobs_template(sqljobs_server: str) -> Iterator[Template]:
    """The migrated template every test's database is cloned from."""
    template = Template(sqljobs_server)
    yield template
    template.close()


@pytest.fixture
def sqljobs_db(sqljobs_template: Template,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[TestDatabase]:
    """A database of the test's own: the schema installed, no jobs, $SQLJOBS_DSN set."""
    name = sqljobs_template.clone()
    database = TestDatabase(database_dsn(sqljobs_template.admin_dsn, name))
    monkeypatch.setenv("SQLJOBS_DSN", database.dsn)
    try:
        yield database
    finally:
        database.release()
        sqljobs_template.release(name)


__all__ = ["pytest_addoption", "sqljobs_db", "sqljobs_server", "sqljobs_template"]
