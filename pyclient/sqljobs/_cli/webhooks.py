"""`sqljobs webhooks ...`: the outbound webhooks' switch and attempts, for operators.

    sqljobs webhooks                                  the disabled endpoints
    sqljobs webhooks disable NAME --reason TEXT [--tenant T]
    sqljobs webhooks enable NAME
    sqljobs webhooks attempts JOB_ID                  one webhook job's recorded attempts

Each is one function of sql/87_integrations.sql (jobs.webhook_endpoints, webhook_disable,
webhook_enable, webhook_attempts): no app is needed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, connected_client
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import queries

webhooks_app = typer.Typer(
    help="Outbound webhooks: the disabled endpoints, disable, enable, a job's attempts.")


@webhooks_app.callback(invoke_without_command=True)
def webhooks_list(ctx: typer.Context, dsn: DsnOption = None,
                  as_json: JsonOption = False) -> None:
    """The disabled endpoints (jobs.webhook_endpoints): name, tenant, why, by whom."""
    if ctx.invoked_subcommand is not None:
        return
    with connected_client(dsn) as client:
        rows = client.run(queries.webhook_endpoints())
    if as_json:
        output.emit_json({"disabled": [r.model_dump(mode="json") for r in rows]})
        return
    table = Listing("endpoint", "tenant", "reason", "by", "since (UTC)",
                    title=f"{len(rows)} disabled endpoint(s)")
    for r in rows:
        table.add_row(r.name, r.tenant or "", r.reason, r.disabled_by,
                      r.disabled_at.strftime("%Y-%m-%d %H:%M:%S"))
    output.show(table)


@webhooks_app.command("disable")
def webhooks_disable(
    name: Annotated[str, typer.Argument(help="The webhook's name (its job's).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (shown with the refusal).")],
    tenant: Annotated[str | None, typer.Option(
        "--tenant", help="The endpoint's tenant, when it has one.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Disable an endpoint: its jobs fail at once with WebhookDisabled, no request sent."""
    with connected_client(dsn) as client:
        client.run(queries.webhook_disable(name, tenant, reason))
    output.say(f"webhook {name}: disabled")


@webhooks_app.command("enable")
def webhooks_enable(name: Annotated[str, typer.Argument(help="The webhook's name.")],
                    dsn: DsnOption = None) -> None:
    """Enable a disabled endpoint again (its failed jobs stay failed: retry them)."""
    with connected_client(dsn) as client:
        was = client.run(queries.webhook_enable(name))
    output.say(f"webhook {name}: {'enabled' if was else 'was not disabled'}")


@webhooks_app.command("attempts")
def webhooks_attempts(job_id: Annotated[int, typer.Argument(help="The webhook job's id.")],
                      dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """One webhook job's recorded attempts: outcome, status, latency, redacted excerpt."""
    with connected_client(dsn) as client:
        rows = client.run(queries.webhook_attempts(job_id))
    if as_json:
        output.emit_json({"job_id": job_id,
                          "attempts": [r.model_dump(mode="json") for r in rows]})
        return
    table = Listing("attempt", "outcome", "status", "ms", "excerpt",
                    title=f"{len(rows)} attempt(s) of job {job_id}")
    for r in rows:
        table.add_row(r.attempt, r.outcome, r.status if r.status is not None else "",
                      r.latency_ms, (r.excerpt or "")[:80])
    output.show(table)
