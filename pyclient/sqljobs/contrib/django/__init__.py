"""sqljobs in a Django project: `INSTALLED_APPS += ["sqljobs.contrib.django"]`.

    SQLJOBS = {
        "APP": "shop.jobs:app",     # the sqljobs App (module:attribute) the commands serve
        "DATABASE": "default",      # the Django database the jobs live in (default)
    }

- `manage.py migrate` installs and upgrades the `jobs` schema: one Django migration per
  sqljobs schema version, each running that version's packaged SQL.
- `send_mail.enqueue(payload, key=..., conn=sqljobs.contrib.django.connection())`
  writes the job in Django's own transaction: inside `transaction.atomic()` it commits
  or rolls back with the model rows, with no `on_commit` hook to lose.
- `manage.py sqljobs worker` (scheduler, relay, jobs, ...) runs the `sqljobs` command
  with the App and the database from the settings; `manage.py sqljobs_worker` is
  `manage.py sqljobs worker`.
- A read-only admin of the jobs (`jobs.job_view`, redacted), and a system check
  (`manage.py check --database default`) that the schema is the one this package needs.

docs/howto-django.md walks through it.
"""

from __future__ import annotations

from typing import Any

import psycopg


def connection(using: str | None = None) -> psycopg.Connection[Any]:
    """The psycopg connection under Django's connection `using` (default: the SQLJOBS
    "DATABASE"), opened if need be: pass it as `conn=` to enqueue in Django's
    transaction."""
    from django.db import connections

    from sqljobs.contrib.django._settings import database_alias

    wrapper = connections[using or database_alias()]
    wrapper.ensure_connection()
    raw: psycopg.Connection[Any] = wrapper.connection
    return raw


def dsn(using: str | None = None) -> str:
    """The libpq DSN of Django's database `using` (default: the SQLJOBS "DATABASE"),
    or the SQLJOBS "DSN" setting when given."""
    from sqljobs.contrib.django._settings import database_dsn

    return database_dsn(using)


__all__ = ["connection", "dsn"]
