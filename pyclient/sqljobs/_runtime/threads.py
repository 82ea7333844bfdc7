"""A small pool of daemon threads for sync handlers.

`concurrent.futures.ThreadPoolExecutor` joins its threads at interpreter exit, so one
sync handler that ignores `ctx.cancelled` would keep a drained worker from exiting.
These threads are daemons: the worker settles a stopped run at once (its job goes back
or is retried) and the process may exit even if such a thread is still busy.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_Item = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]] | None


class DaemonThreadPool:
    """At most `size` daemon threads, started on demand, running submitted calls."""

    def __init__(self, size: int, name: str = "sqljobs-handler") -> None:
        self._size = size
        self._name = name
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        with self._lock:
            if len(self._threads) < self._size:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)

    def shutdown(self) -> None:
        """Ask idle threads to exit; busy ones finish their call first (never joined)."""
        with self._lock:
            for _ in self._threads:
                self._queue.put(None)
            self._threads = []
