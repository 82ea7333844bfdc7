"""The SQLJOBS setting: which App, which database.

    SQLJOBS = {"APP": "shop.jobs:app", "DATABASE": "default", "DSN": None}

"APP" is what `manage.py sqljobs worker` serves and what the app config points at the
database; "DATABASE" is the Django alias whose database holds the jobs; "DSN" (rarely
needed) overrides the DSN made from that alias's settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from psycopg import pq
from psycopg.conninfo import make_conninfo

from sqljobs._client.errors import ConfigurationError

if TYPE_CHECKING:
    from sqljobs._app.app import App

_KEYS = frozenset({"APP", "DATABASE", "DSN"})
# the connection parameters libpq knows (Django adds Python objects of its own)
_LIBPQ = frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())


def _setting() -> dict[str, Any]:
    from django.conf import settings

    value = getattr(settings, "SQLJOBS", {})
    if not isinstance(value, dict):
        raise ConfigurationError("settings.SQLJOBS must be a dict")
    unknown = set(value) - _KEYS
    if unknown:
        raise ConfigurationError(f"settings.SQLJOBS has unknown keys {sorted(unknown)} "
                                 f"(known: {sorted(_KEYS)})")
    return value


def database_alias() -> str:
    alias = _setting().get("DATABASE") or "default"
    return str(alias)


def database_dsn(using: str | None = None) -> str:
    """SQLJOBS["DSN"], else the DSN of Django's database `using` (default: "DATABASE")."""
    configured = _setting().get("DSN")
    if configured and using is None:
        return str(configured)
    from django.db import connections

    wrapper = connections[using or database_alias()]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(f"Django database {wrapper.alias!r} is {wrapper.vendor}: "
                                 f"sqljobs needs PostgreSQL")
    params = wrapper.get_connection_params()
    return make_conninfo(**{key: str(value) for key, value in params.items()
                            if key in _LIBPQ and value is not None and value != ""})


def configured_app() -> App | None:
    """The App SQLJOBS["APP"] names ("module:attribute"), or None when not set."""
    from sqljobs._app.app import App

    target = _setting().get("APP")
    if not target:
        return None
    module_name, _, attribute = str(target).partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f'settings.SQLJOBS["APP"] is module:attribute, not {target!r}')
    found = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(found, App):
        raise ConfigurationError(f'settings.SQLJOBS["APP"] = {target!r} is not a sqljobs App')
    return found


__all__ = ["configured_app", "database_alias", "database_dsn"]
