"""`manage.py check --database default`: is the jobs schema the one this package needs?

Like `App.open()`, it refuses a schema that is missing, older than this package needs,
or newer than it can use (SchemaError's message), once sqljobs' own Django migrations
are all applied: the schema then no longer matches them (dropped or changed behind
Django's back, or a sqljobs package older than the database). While some are still to
be applied it says nothing: Django itself reports unapplied migrations, and `migrate`
runs this check before it applies the ones that fix it.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from sqljobs._client.connection import Client
from sqljobs._client.database import check_schema
from sqljobs._client.errors import SchemaError


@checks.register(checks.Tags.database)
def schema_check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    from sqljobs.contrib.django._settings import database_alias

    alias = database_alias()
    if not databases or alias not in databases:
        return []
    wrapper = connections[alias]
    try:
        check_schema(Client(_raw(wrapper)))
    except SchemaError as error:
        executor = MigrationExecutor(wrapper)
        pending = [m for m, _ in executor.migration_plan(
            executor.loader.graph.leaf_nodes()) if m.app_label == "sqljobs"]
        if pending:
            return []
        message = str(error).replace("sqljobs migrate --dsn <dsn>", "manage.py migrate sqljobs")
        return [checks.Error(message, id="sqljobs.E001",
                             hint="the schema no longer matches sqljobs' applied migrations")]
    return []


def _raw(wrapper: Any) -> Any:
    wrapper.ensure_connection()
    return wrapper.connection
