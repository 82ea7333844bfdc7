"""The Django app config: binds the configured App to Django's database, adds the check."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class SqljobsConfig(AppConfig):
    name = "sqljobs.contrib.django"
    label = "sqljobs"
    verbose_name = "sqljobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from sqljobs.contrib.django import _checks  # noqa: F401 (registers the check)
        from sqljobs.contrib.django._settings import configured_app, database_alias

        app = configured_app()
        if app is None or app.pools.given is not None:
            return  # no App named, or one with a DSN of its own: leave it be
        alias = database_alias()

        def bind(sender: Any, connection: Any, **kwargs: Any) -> None:
            """Point the App's pools where Django's database is now: a test run swaps
            in its test database after start-up, so this follows each new connection."""
            from sqljobs.contrib.django._settings import database_dsn

            if connection.alias != alias:
                return
            dsn = database_dsn()
            if app.pools.given != dsn:
                app.pools.close()
                app.pools.given = dsn

        connection_created.connect(bind, weak=False, dispatch_uid="sqljobs.bind_app")
