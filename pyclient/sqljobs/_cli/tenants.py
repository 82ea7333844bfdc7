"""`sqljobs tenants ...`: the roles bound to one tenant (sql/15_tenancy.sql)."""

from __future__ import annotations

from typing import Annotated

import typer

from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, connected_client, err_console
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import queries

tenants_app = typer.Typer(
    help="Bind login roles to a tenant: a bound session acts only within its tenant "
         "(docs/howto-roles.md).",
    no_args_is_help=True,
)


@tenants_app.command("list")
def tenants_list(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Every role bound to a tenant. With --json: {"bindings": [...]}."""
    with connected_client(dsn) as client:
        bindings = client.run(queries.tenant_bindings())
    if as_json:
        output.emit_json({"bindings": [b.model_dump(mode="json") for b in bindings]})
        return
    table = Listing("role", "tenant", "since (UTC)", title=f"{len(bindings)} binding(s)")
    for b in bindings:
        table.add_row(b.role_name, b.tenant, b.updated_at.strftime("%Y-%m-%d %H:%M:%S"))
    output.show(table)


@tenants_app.command("bind")
def tenants_bind(
    role: Annotated[str, typer.Argument(help="The role (a login role, or a group role "
                                             "whose members are bound with it).")],
    tenant: Annotated[str, typer.Argument(help="The tenant its sessions act within.")],
    dsn: DsnOption = None,
) -> None:
    """Bind a role to one tenant (or move it to another); it holds from its next call on."""
    with connected_client(dsn) as client:
        created = client.run(queries.tenant_bind(role, tenant))
    output.say(f"{'bound' if created else 'rebound'} role {role} to tenant {tenant}")


@tenants_app.command("unbind")
def tenants_unbind(role: Annotated[str, typer.Argument(help="The bound role.")],
                   dsn: DsnOption = None) -> None:
    """Remove a role's binding: its sessions act on every tenant again."""
    with connected_client(dsn) as client:
        removed = client.run(queries.tenant_unbind(role))
    if not removed:
        err_console.print(f"role {role} is bound to no tenant", markup=False, highlight=False)
        raise typer.Exit(output.NOT_FOUND)
    output.say(f"unbound role {role}")
