"""The worker, split by the steps a job takes through it (see `worker.py`'s docstring)."""

from sqljobs._runtime.worker.settling import Settlement, error_record
from sqljobs._runtime.worker.worker import Worker, run_worker, run_worker_async

__all__ = ["Settlement", "Worker", "error_record", "run_worker", "run_worker_async"]
