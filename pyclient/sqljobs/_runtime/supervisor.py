"""Several worker processes on one host, under one supervisor: `sqljobs worker --processes N`.

    $ sqljobs worker myapp.jobs:app --processes 4 --id pod-a    # workers pod-a/1 .. pod-a/4

One Python process runs one event loop on one core; a host with more cores runs more
worker processes. The supervisor starts N `sqljobs worker` processes with the same
options, each under its own id (`<id>/<n>`, so `sqljobs workers` and the jobs' `worker`
column tell them apart and a restarted process keeps its name), and then only watches:

  * the first SIGTERM or SIGINT is passed on to every process once: each drains as a
    single worker does (hands back what waits, lets what runs finish, within
    --drain-timeout), and the supervisor exits when all have, with the highest exit
    code of theirs; a second signal is passed on too, and they stop at once;
  * a process that exits on its own (a crash, the OOM killer) is started again under
    the same id, after a pause that doubles from 1 s up to 30 s while it keeps failing
    within a minute of its start; its jobs come back by lease recovery meanwhile;
  * the processes run in sessions of their own, so a terminal's Ctrl-C reaches them
    once, through the supervisor; each watches its parent and drains if the supervisor
    dies (SQLJOBS_SUPERVISOR_PID).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

logger = logging.getLogger("sqljobs.supervisor")

PARENT_ENV = "SQLJOBS_SUPERVISOR_PID"
_FIRST_PAUSE_S = 1.0
_LONGEST_PAUSE_S = 30.0
_HEALTHY_AFTER_S = 60.0  # a process that ran this long before it died starts again at once
_POLL_S = 0.2


@dataclass
class _Child:
    number: int
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    pause: float = _FIRST_PAUSE_S
    restart_at: float | None = None
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    """Runs `commands` (one argv per worker process) until they have all stopped."""

    def __init__(self, commands: Sequence[Sequence[str]],
                 env: Mapping[str, str] | None = None) -> None:
        if not commands:
            raise ValueError("a supervisor needs at least one process to run")
        self._children = [_Child(i + 1, list(c)) for i, c in enumerate(commands)]
        self._env = {**(env if env is not None else os.environ), PARENT_ENV: str(os.getpid())}
        self._signals = 0  # signals received: 1 drains, 2 stops at once
        self._lock = threading.Lock()

    def run(self) -> int:
        """Start every process and watch them; answers the exit code (see the module doc)."""
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for child in self._children:
                self._start(child)
            forwarded = 0
            while True:
                with self._lock:
                    signals = self._signals
                while forwarded < min(signals, 2):
                    forwarded += 1
                    self._forward(signal.SIGTERM, "drain" if forwarded == 1 else "stop now")
                if not self._watch(stopping=signals > 0):
                    break
                time.sleep(_POLL_S)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._kill_left()
        codes = [c.exit_codes[-1] for c in self._children if c.exit_codes]
        code = max(codes, default=0)
        logger.info("supervisor stopped: %d worker process(es) ended, exit code %d",
                    len(codes), code)
        return code

    def stop(self) -> None:
        """As a SIGTERM would: drain every process (thread-safe; a second call stops now)."""
        self._on_signal(signal.SIGTERM, None)

    @property
    def pids(self) -> list[int | None]:
        """The live processes' ids, by process number (None: not running now)."""
        return [c.process.pid if c.process is not None and c.process.poll() is None else None
                for c in self._children]

    # -- the loop -------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        with self._lock:
            self._signals += 1

    def _start(self, child: _Child) -> None:
        child.process = subprocess.Popen(child.command, env=self._env, start_new_session=True)
        child.started = time.monotonic()
        child.restart_at = None
        logger.info("worker process %d started (pid %d)", child.number, child.process.pid)

    def _forward(self, sig: signal.Signals, what: str) -> None:
        live = [c for c in self._children if c.process is not None and c.process.poll() is None]
        logger.info("%s: passing %s to %d worker process(es)", what, sig.name, len(live))
        for child in live:
            assert child.process is not None
            child.process.send_signal(sig)

    def _watch(self, *, stopping: bool) -> bool:
        """Reap exited processes, restart them unless stopping; answers whether any
        process is still running (or due to start again)."""
        now = time.monotonic()
        going = False
        for child in self._children:
            process = child.process
            if process is not None:
                code = process.poll()
                if code is None:
                    going = True
                    continue
                child.exit_codes.append(code)
                child.process = None
                if stopping:
                    logger.info("worker process %d (pid %d) exited with code %d", child.number,
                                process.pid, code)
                    continue
                ran = now - child.started
                child.pause = (_FIRST_PAUSE_S if ran >= _HEALTHY_AFTER_S
                               else min(child.pause * 2, _LONGEST_PAUSE_S))
                child.restart_at = now + (0.0 if ran >= _HEALTHY_AFTER_S else child.pause)
                logger.warning("worker process %d (pid %d) exited with code %d after %.1f s; "
                               "starting it again in %.1f s", child.number, process.pid, code,
                               ran, child.restart_at - now)
            if child.restart_at is not None and not stopping:
                going = True
                if now >= child.restart_at:
                    self._start(child)
        return going

    def _kill_left(self) -> None:
        """The supervisor itself is ending abnormally: stop what still runs."""
        for child in self._children:
            if child.process is not None and child.process.poll() is None:
                child.process.kill()
                child.process.wait()


def watch_parent(stop: Callable[[], None], period_s: float = 1.0) -> None:
    """In a process the supervisor started: call `stop` (a drain) once that supervisor
    is gone, so that no worker outlives it unsupervised. Does nothing otherwise."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return

    def watch() -> None:
        while os.getppid() == int(expected):
            time.sleep(period_s)
        logger.warning("the supervisor (pid %s) is gone: draining", expected)
        stop()

    threading.Thread(target=watch, name="sqljobs-parent-watch", daemon=True).start()


def worker_command(argv: Sequence[str]) -> list[str]:
    """The command that runs `sqljobs <argv>` with this interpreter."""
    return [sys.executable, "-m", "sqljobs", *argv]


__all__ = ["PARENT_ENV", "Supervisor", "watch_parent", "worker_command"]
