"""A declaration's tenant policy, written by a worker as it starts and held by the SQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, JobContext, TenantPolicyRefused, fresh_key
from tests.processes import wait_for
from tests.worker_helpers import running


class Nothing(BaseModel):
    pass


def test_a_declared_tenant_policy_refuses_what_breaks_it(conn: psycopg.Connection[Any],
                                                          db_dsn: str) -> None:
    app = App(db_dsn)

    @app.job(name="tp.billing", queue="tp_q", tenant="required")
    async def billing(ctx: JobContext, payload: Nothing) -> str | None:
        return ctx.tenant

    @app.job(name="tp.fleet", queue="tp_q", tenant="forbidden")
    async def fleet(ctx: JobContext, payload: Nothing) -> None:
        pass

    try:
        with running(app, concurrency=1):  # the worker registers the declarations
            wait_for(lambda: conn.execute(
                "select count(*) = 2 from jobs.job_type where tenant_policy is not null"
            ).fetchone() == (True,), "the policies registered")
            with pytest.raises(TenantPolicyRefused, match="requires a tenant"):
                billing.enqueue({}, key=fresh_key())
            with pytest.raises(TenantPolicyRefused, match="forbids a tenant"):
                fleet.enqueue({}, key=fresh_key(), tenant="acme")
            ok = billing.enqueue({}, key=fresh_key(), tenant="acme").id
            wait_for(lambda: conn.execute("select result from jobs.job where id = %s",
                                          (ok,)).fetchone() == ("acme",), "the tenant's job")
    finally:
        app.close()
    assert conn.execute("select count(*) from jobs.job where name like 'tp.%'").fetchone() == (1,)
