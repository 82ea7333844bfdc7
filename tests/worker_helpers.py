"""Helpers for the worker tests: run a Worker in a thread of this process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqljobs import App, Worker

WAIT_S = 15.0


@contextmanager
def running(app: App, **options: Any) -> Iterator[Worker]:
    settings: dict[str, Any] = {"concurrency": 4, "lease_s": 2.0, "poll_interval": 0.2,
                                "drain_timeout": 5.0, "install_signals": False}
    settings.update(options)
    worker = Worker(app, **settings)
    outcome: dict[str, Any] = {}

    def serve() -> None:
        try:
            outcome["code"] = worker.run()
        except BaseException as error:  # surfaced by the assertion below
            outcome["error"] = error

    thread = threading.Thread(target=serve, name="test-worker")
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the worker did not stop"
    assert "error" not in outcome, outcome.get("error")
    assert outcome["code"] == 0

