"""A local Citus cluster for the tests: a coordinator and two worker nodes on one machine.

Three PostgreSQL clusters made with the initdb of a server that has `citus.so` (built
from the vendored source by `.ci/run`, see docs/howto-citus.md), each listening on
127.0.0.1 at a free port, trust authentication, `shared_preload_libraries = 'citus'`.
The coordinator registers itself (`citus_set_coordinator_host`) and adds the two workers
(`citus_add_node`); every node has the one database the tests use, with the extension.
As root, the servers run as the `postgres` system user (initdb refuses root).

    with local_cluster(tmp_path) as cluster:
        cluster.coordinator        # DSN of the database on the coordinator
        cluster.workers            # DSNs of the same database on each worker node
        cluster.stop_node(1) / cluster.start_node(1)

`python -m tests.harness.citus DIR` starts one and keeps it running until Ctrl-C
(`make citus-cluster`), for trying sqljobs on Citus by hand or benchmarking it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

DATABASE = "sqljobs"

# Each database with the extension runs a Citus maintenance daemon (a background worker);
# room for it beside the parallel workers and the logical replication launcher.
CONFIG = """
shared_preload_libraries = 'citus'
listen_addresses = '127.0.0.1'
max_connections = 200
max_worker_processes = 32
fsync = off
synchronous_commit = off
full_page_writes = off
"""


class CitusUnavailable(RuntimeError):
    """No PostgreSQL server on this machine has the Citus extension installed."""


def citus_bin_dir() -> Path:
    """The bin directory of the newest installed PostgreSQL whose lib has citus.so.

    $SQLJOBS_CITUS_PG_BIN overrides it. Raises CitusUnavailable, saying how to get one.
    """
    if override := os.environ.get("SQLJOBS_CITUS_PG_BIN"):
        return Path(override)
    libs = sorted(glob.glob("/usr/lib/postgresql/*/lib/citus.so"),
                  key=lambda path: int(Path(path).parent.parent.name))
    if not libs:
        raise CitusUnavailable(
            "no PostgreSQL server here has Citus (no /usr/lib/postgresql/*/lib/citus.so). "
            "Build it from the vendored source with `bash ../shared/vendor/build-citus.sh` "
            "(as root, about 3 minutes; .ci/run does it), or install a Citus package, or "
            "set SQLJOBS_CITUS_PG_BIN to the bin directory of a server that has it.")
    return Path(libs[-1]).parent.parent / "bin"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Node:
    data: Path
    port: int
    log: Path

    def dsn(self, dbname: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"


@dataclass
class LocalCluster:
    bin_dir: Path
    nodes: list[Node] = field(default_factory=list)  # [coordinator, worker 1, worker 2]

    @property
    def coordinator(self) -> str:
        return self.nodes[0].dsn()

    @property
    def workers(self) -> list[str]:
        return [node.dsn() for node in self.nodes[1:]]

    def stop_node(self, index: int, mode: str = "immediate") -> None:
        """Stop one node (`immediate`: as a crash would, no shutdown checkpoint)."""
        node = self.nodes[index]
        _run_as_owner([str(self.bin_dir / "pg_ctl"), "-D", str(node.data), "-m", mode,
                       "-w", "stop"])

    def create_database(self, name: str) -> None:
        """`name` on every node, with the extension, the workers added to its coordinator
        (Citus keeps its node list per database)."""
        for node in self.nodes:
            _execute(node.dsn("postgres"), f'create database "{name}"')
            _execute(node.dsn(name), "create extension citus")
        coordinator = self.nodes[0]
        _execute(coordinator.dsn(name),
                 f"select citus_set_coordinator_host('127.0.0.1', {coordinator.port})",
                 *(f"select citus_add_node('127.0.0.1', {node.port})"
                   for node in self.nodes[1:]))

    def start_node(self, index: int) -> None:
        node = self.nodes[index]
        _run_as_owner([str(self.bin_dir / "pg_ctl"), "-D", str(node.data), "-l",
                       str(node.log), "-o", f"-p {node.port}", "-w", "-t", "120", "start"])


def _owner() -> str | None:
    """The system user the servers run as: `postgres` as root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as error:
        raise CitusUnavailable("running as root needs a `postgres` system user for the "
                               "Citus test servers (initdb refuses root)") from error
    return "postgres"


def _run_as_owner(command: list[str]) -> None:
    owner = _owner()
    if owner is not None:
        command = ["runuser", "-u", owner, "--", *command]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({out.returncode}):\n"
                           f"{out.stdout}\n{out.stderr}")


def _execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # harness literals


@contextmanager
def local_cluster(root: Path, workers: int = 2) -> Iterator[LocalCluster]:
    """Start a coordinator and `workers` worker nodes under `root`; stop them after."""
    bin_dir = citus_bin_dir()
    root.mkdir(parents=True, exist_ok=True)
    owner = _owner()
    if owner is not None:
        shutil.chown(root, user=owner)
        # the servers' user must reach `root` through the directories above it
        for parent in root.resolve().parents:
            if parent != Path("/"):
                parent.chmod(parent.stat().st_mode | 0o001)
    cluster = LocalCluster(bin_dir)
    with ExitStack() as stack:
        for index in range(workers + 1):
            name = "coordinator" if index == 0 else f"worker{index}"
            node = Node(root / name, _free_port(), root / f"{name}.log")
            _run_as_owner([str(bin_dir / "initdb"), "-D", str(node.data), "-A", "trust",
                           "-U", "postgres", "--no-sync"])
            with (node.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
                conf.write(CONFIG + f"unix_socket_directories = '{node.data}'\n")
            cluster.nodes.append(node)
            cluster.start_node(index)
            stack.callback(_stop_quietly, cluster, index)
        cluster.create_database(DATABASE)
        yield cluster


@contextmanager
def cluster_for_tests() -> Iterator[LocalCluster]:
    """A local cluster for a test module: skipped where no PostgreSQL has Citus, failed
    instead under SQLJOBS_REQUIRE_CITUS=1 (CI)."""
    import pytest

    try:
        citus_bin_dir()
    except CitusUnavailable as error:
        if os.environ.get("SQLJOBS_REQUIRE_CITUS") == "1":
            pytest.fail(f"SQLJOBS_REQUIRE_CITUS=1, but {error}")
        pytest.skip(str(error))
    # Not under pytest's basetemp: every pytest session that starts on the machine (another
    # checkout's, a subprocess's) sets /tmp/pytest-of-<user> back to 0700, and the servers'
    # own user then loses its way to its data directory (pg_ctl stop: permission denied).
    root = Path(tempfile.mkdtemp(prefix="sqljobs-citus-"))
    try:
        with local_cluster(root) as made:
            yield made
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stop_quietly(cluster: LocalCluster, index: int) -> None:
    # RuntimeError: already stopped (a test stopped it); its data goes with `root`
    with suppress(RuntimeError):
        cluster.stop_node(index, mode="fast")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.harness.citus DIR", file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    with local_cluster(root) as cluster:
        print(f"coordinator: {cluster.coordinator}")
        for dsn in cluster.workers:
            print(f"worker:      {dsn}")
        print("running; Ctrl-C (or SIGTERM) stops the three servers", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unwinds: servers stop
        with suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
