"""A throwaway PostgreSQL cluster under a temporary directory (initdb + pg_ctl), the only
server the chaos suite ever restarts: it is the suite's own, on a port of its own."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN_DIRS = [Path("/usr/lib/postgresql/15/bin"), Path("/usr/lib/postgresql/16/bin")]


def _bin(name: str) -> str:
    for directory in BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found (looked in {BIN_DIRS} and on PATH)")
    return found


def _as_owner() -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the postgres user."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    MAX_CONNECTIONS = 200

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sqljobs-chaos-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.max_connections = max_connections
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        if not self.data.exists():
            subprocess.run([*_as_owner(), _bin("initdb"), "-D", str(self.data), "-U", "postgres",
                            "-A", "trust", "--no-sync"], check=True, capture_output=True)
        self._ctl("start", "-w", "-l", str(self.root / "server.log"), "-o", self._options())

    def restart(self, max_connections: int | None = None) -> None:
        """Fast shutdown (every session cut), then start: a crash, as clients see it;
        with `max_connections`, the server comes back with that many slots."""
        if max_connections is not None:
            self.max_connections = max_connections
        self._ctl("restart", "-w", "-m", "fast", "-l", str(self.root / "server.log"),
                  "-o", self._options())

    def refused_connections(self) -> int:
        """Connections the server refused for want of a slot so far (its log says so)."""
        log = self.root / "server.log"
        if not log.exists():
            return 0
        text = log.read_text(errors="replace")
        return text.count("too many clients already") + text.count("remaining connection slots")

    def _options(self) -> str:
        return (f"-p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c unix_socket_directories={self.root} "
                f"-c max_connections={self.max_connections}")

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run([*_as_owner(), _bin("pg_ctl"), "-D", str(self.data), "stop",
                            "-m", "immediate"],
                           capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _ctl(self, *args: str) -> None:
        subprocess.run([*_as_owner(), _bin("pg_ctl"), "-D", str(self.data), *args], check=True,
                       capture_output=True, timeout=120)
