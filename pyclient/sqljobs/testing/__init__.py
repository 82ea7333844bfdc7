"""sqljobs.testing: test your jobs against a real database, without ceremony.

A pytest plugin, opt-in: `pytest -p sqljobs.testing`, or `pytest_plugins =
["sqljobs.testing"]` in a conftest.py. docs/howto-testing.md walks through it.

    def test_signup_sends_a_welcome(sqljobs_db):
        sqljobs_db.use(app)
        signup("a@example.com")
        assert_enqueued(send_welcome, payload={"to": "a@example.com"})
        assert drain(app).counts == {"succeeded": 1}

Fixtures: `sqljobs_db` (a migrated database of the test's own, with its `clock`),
`sqljobs_template`, `sqljobs_server`. Functions: `enqueued`, `assert_enqueued`,
`refute_enqueued`, `assert_subject_coverage`, `drain` / `drain_async`, `perform` /
`perform_async`, `fire_due` / `fire_due_async`.
"""

from __future__ import annotations

from sqljobs.testing._assertions import (
    ANY,
    EnqueuedJob,
    assert_enqueued,
    assert_subject_coverage,
    enqueued,
    refute_enqueued,
)
from sqljobs.testing._clock import Clock, ClockError
from sqljobs.testing._drain import (
    Drained,
    DrainTimeout,
    Outcome,
    drain,
    drain_async,
    fire_due,
    fire_due_async,
)
from sqljobs.testing._fixture import TestDatabase
from sqljobs.testing._perform import StepsNeedAJob, perform, perform_async
from sqljobs.testing._plugin import (
    pytest_addoption,
    sqljobs_db,
    sqljobs_server,
    sqljobs_template,
)

__all__ = [
    "ANY",
    "Clock",
    "ClockError",
    "DrainTimeout",
    "Drained",
    "EnqueuedJob",
    "Outcome",
    "StepsNeedAJob",
    "TestDatabase",
    "assert_enqueued",
    "assert_subject_coverage",
    "drain",
    "drain_async",
    "enqueued",
    "fire_due",
    "fire_due_async",
    "perform",
    "perform_async",
    "pytest_addoption",
    "refute_enqueued",
    "sqljobs_db",
    "sqljobs_server",
    "sqljobs_template",
]
