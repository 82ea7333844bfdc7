"""`sqljobs limits ...` and `sqljobs leases`: flow control at run time (sql/35_limits.sql)."""

from __future__ import annotations

from typing import Annotated

import typer

from sqljobs._cli import output
from sqljobs._cli.common import (
    DsnOption,
    connected_client,
    err_console,
    finite,
    load_app,
    whole,
)
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import queries
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.records import LimitRecord, LimitUse
from sqljobs._declare.limits import Limit, declared_writes

limits_app = typer.Typer(
    help="Concurrency and rate limits the claim enforces: list, set, remove, sync.",
    no_args_is_help=True,
)


def _rate(n: int | None, per_s: float | None) -> str:
    return "" if n is None or per_s is None else f"{n} / {per_s:g} s"


def limits_table(records: list[LimitRecord]) -> Listing:
    table = Listing("limit", "scope", "target", "key", "concurrency", "rate", "when busy",
                  "origin", title=f"{len(records)} limit(s)")
    for r in records:
        table.add_row(r.name, r.scope, r.target or ("each tenant" if r.scope == "tenant" else ""),
                      ".".join(r.key_path or ()), r.concurrency, _rate(r.rate_n, r.rate_per_s),
                      r.when_busy, r.origin)
    return table


def use_table(use: list[LimitUse]) -> Listing:
    """Each limit group in use: what runs against what it allows, and what it holds back."""
    table = Listing("limit", "key", "running / concurrency", "starts in window / rate",
                  "waiting (slot)", "deferred (rate)", title="limits in use")
    for u in use:
        key = u.grp.split("|", 1)[1] if "|" in u.grp else ""
        table.add_row(
            u.limit_name, key,
            "" if u.concurrency is None else f"{u.running} / {u.concurrency}",
            "" if u.rate_n is None else f"{u.recent_starts} / {_rate(u.rate_n, u.rate_per_s)}",
            u.waiting, u.deferred)
    return table


@limits_app.command("list")
def limits_list(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Every limit as defined, then every group in use with the jobs it holds back.
    With --json: {"limits": [...], "in_use": [...]}."""
    with connected_client(dsn) as client:
        records = client.run(queries.limits())
        use = client.run(queries.limit_stats())
    if as_json:
        output.emit_json({"limits": [r.model_dump(mode="json") for r in records],
                          "in_use": [u.model_dump(mode="json") for u in use]})
        return
    output.show(limits_table(records), use_table(use) if use else None)


@limits_app.command("set")
def limits_set(
    name: Annotated[str, typer.Argument(help="The limit's name.")],
    scope: Annotated[str, typer.Option(help="global, queue, name, tenant or key.")],
    target: Annotated[str | None, typer.Option(
        help="The queue (queue), job name (name, key) or tenant (tenant; omit for each "
             "tenant on its own).")] = None,
    key: Annotated[str | None, typer.Option(
        help="key scope: the payload field whose value is the key (a.b for a nested "
             "field).")] = None,
    concurrency: Annotated[int | None, typer.Option(help="At most this many running.",
                                                    **whole())] = None,
    rate: Annotated[int | None, typer.Option(help="At most this many starts per --per.",
                                             **whole())] = None,
    per: Annotated[float, typer.Option(help="The rate's window, in seconds.",
                                       **finite())] = 1.0,
    when_busy: Annotated[str, typer.Option(
        help="key scope: wait for the key, or fail the job when another run holds it.")]
        = "wait",
    dsn: DsnOption = None,
) -> None:
    """Define a limit (or replace it); it holds from the next claim on."""
    try:
        limit = Limit.build(name, scope=scope, target=target,
                            key=None if key is None else key.split("."),
                            concurrency=concurrency,
                            rate=None if rate is None else (rate, per), when_busy=when_busy)
    except ConfigurationError as error:
        err_console.print(f"[red]error:[/red] {error}")
        raise typer.Exit(2) from error
    with connected_client(dsn) as client:
        created = client.run(queries.limit_put(name, limit.definition("api")))
    output.say(f"{'created' if created else 'replaced'} limit {name}")


@limits_app.command("remove")
def limits_remove(name: Annotated[str, typer.Argument(help="The limit's name.")],
                  dsn: DsnOption = None) -> None:
    """Delete a limit; the jobs waiting on it become claimable."""
    with connected_client(dsn) as client:
        client.run(queries.limit_remove(name))
    output.say(f"removed limit {name}")


@limits_app.command("sync")
def limits_sync(
    target: Annotated[str, typer.Argument(help="The App whose declared limits to store, "
                                               "as module:attribute.")],
    dsn: DsnOption = None,
) -> None:
    """Store the limits an app declares in code (missing or changed ones; a limit set at
    run time is left alone), as the scheduler does when it starts: for a deploy step run
    by an operator, since a worker's role may not write limits."""
    application = load_app(target)
    with connected_client(dsn if dsn is not None else application.pools.given) as client:
        writes = declared_writes(application.declared_limits.values(),
                                 client.run(queries.limits()))
        client.run_all(writes)
    output.say(f"{len(writes)} declared limit(s) written, "
               f"{len(application.declared_limits) - len(writes)} already stored")


def leases(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """List named leases (locks, the scheduler's leadership): holder, expiry (never a
    token: that is its holder's proof). With --json: {"leases": [...]}."""
    with connected_client(dsn) as client:
        found = client.run(queries.leases())
    if as_json:
        output.emit_json({"leases": [lease.model_dump(mode="json") for lease in found]})
        return
    table = Listing("name", "holder", "expires (UTC)", "live",
                    title=f"{len(found)} lease(s)")
    for lease in found:
        table.add_row(lease.name, lease.holder,
                      lease.lease_expires_at.strftime("%Y-%m-%d %H:%M:%S")
                      if lease.lease_expires_at else "", "yes" if lease.live else "")
    output.show(table)
