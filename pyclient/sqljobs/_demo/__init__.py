"""`sqljobs demo`: every feature on example jobs, in under a minute, in one process.

    $ sqljobs demo                   # the embedded PostgreSQL (no DSN given)
    $ sqljobs demo --dsn postgresql://postgres@127.0.0.1:5432/app

`jobs` declares the example jobs, `runner` enqueues and serves them (a real worker and
scheduler) while `display` shows the queues live, and `summary` tells what the database
holds at the end. The demo's jobs (named `demo.*`, on `demo-*` queues) stay in the
database.
"""

from __future__ import annotations

from sqljobs._demo.runner import run_demo

__all__ = ["run_demo"]
