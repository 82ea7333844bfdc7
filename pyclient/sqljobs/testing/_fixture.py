"""`TestDatabase`: the `sqljobs_db` fixture's value, one cloned database for one test.

    def test_signup(sqljobs_db, client):
        sqljobs_db.use(app)                  # the app's calls go to this test's database
        client.post("/signup", json={...})
        assert_enqueued(send_welcome, payload={"to": "a@example.com"})
        sqljobs_db.clock.advance(3600)

The fixture also sets $SQLJOBS_DSN for the test, so an `App()` made without a DSN, and
the kit's assertions, find the database without being told.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import TYPE_CHECKING

from psycopg.conninfo import conninfo_to_dict

from sqljobs._client.pools import Pools
from sqljobs.testing._clock import Clock, dsn_at

if TYPE_CHECKING:
    from sqljobs._app.app import App

DSN_VARIABLE = "SQLJOBS_DSN"


class TestDatabase:
    """One test's database (the `sqljobs_db` fixture): its `dsn`, its `clock`, and the
    apps bound to it with `use`. The fixture also sets $SQLJOBS_DSN to `dsn`."""

    __test__ = False  # not a test class, whatever its name says to pytest

    def __init__(self, dsn: str) -> None:
        self._base_dsn = dsn
        self.dsn = dsn  # carries the test clock's time once it moved (sqljobs.testing._clock)
        self.name = str(conninfo_to_dict(dsn)["dbname"])
        self.clock = Clock(lambda: self.dsn, self._moved, self._moved_async)
        self._bound: list[tuple[App, Pools]] = []

    def use(self, app: App) -> App:
        """Point `app` at this database for the test (its previous pools are closed and
        given back after it); answers the app."""
        previous = app.pools
        if previous._async_pool is not None:
            raise RuntimeError("the app's asyncio pool is open: await app.close_async() "
                               "before use(app)")
        previous.close()
        app.pools = Pools(self.dsn, min_size=previous.min_size, max_size=previous.max_size)
        self._bound.append((app, previous))
        return app

    def _moved(self, when: datetime) -> None:
        """The clock moved: sessions opened before it keep the old time, so the bound
        apps' pools reopen (on their next call) from the new DSN."""
        for app, _ in self._bound:
            if app.pools._async_pool is not None:
                raise RuntimeError("an app's asyncio pool is open: in an asyncio test, "
                                   "move the clock with `await clock.advance_async(...)`")
        self._set_dsn(when)
        for app, _ in self._bound:
            app.pools.close()
            app.pools.given = self.dsn

    async def _moved_async(self, when: datetime) -> None:
        self._set_dsn(when)
        for app, _ in self._bound:
            app.pools.close()
            reopen = app.pools._async_pool is not None
            await app.pools.close_async()
            app.pools.given = self.dsn
            if reopen:
                await app.pools.open_async()

    def _set_dsn(self, when: datetime) -> None:
        self.dsn = dsn_at(self._base_dsn, when)
        os.environ[DSN_VARIABLE] = self.dsn  # the fixture's monkeypatch restores it

    def release(self) -> None:
        """Close what the test opened and give each app its own pools back (the
        fixture calls it after the test)."""
        for app, previous in reversed(self._bound):
            app.pools.close()
            app.pools = previous
        self._bound.clear()

    def __repr__(self) -> str:
        return f"TestDatabase({self.name!r})"


__all__ = ["TestDatabase"]
