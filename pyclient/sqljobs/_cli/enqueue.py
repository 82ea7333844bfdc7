"""`sqljobs enqueue NAME`: one job from the command line (as `celery call` or
`procrastinate defer` do), through the same `jobs.enqueue` every producer calls.

The job-type registry (`jobs.job_types()`, written by every worker as it starts) says
which queue serves NAME: the job goes there unless --queue says otherwise, and a
--queue its workers do not serve is warned about. A NAME no worker has registered is
refused (nothing would ever run it) unless --force.

Exit codes: 0 the job exists (created, deduped or debounced), 1 the engine refused the
spec (its SQLSTATE and message on stderr) or NAME is not registered, 2 bad usage (a
payload that is not JSON, an empty --key, a --delay that is not a finite number of
seconds up to a century, a number beyond a bigint, an argument that is not UTF-8).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import psycopg
import typer
from rich.markup import escape

from sqljobs import fresh_key
from sqljobs._cli.common import (
    DsnOption,
    connected_client,
    err_console,
    finite,
    json_option,
    whole,
)
from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client
from sqljobs._client.records import JobSpec


def enqueue(
    name: Annotated[str, typer.Argument(help="The job's name (as its workers declare it).")],
    payload: Annotated[str, typer.Option(help="The payload, a JSON object.")] = "{}",
    key: Annotated[str | None, typer.Option(
        help="The idempotency key: a second enqueue with it answers the same job "
             "(deduped). Default: a fresh key, so every call makes a new job.")] = None,
    queue: Annotated[str | None, typer.Option(
        help="Queue (default: the queue NAME's workers registered for it).")] = None,
    delay: Annotated[float | None, typer.Option(
        help="Seconds from now (database clock) before it may run.", **finite())] = None,
    run_at: Annotated[datetime | None, typer.Option(
        help="When it may run (ISO 8601; instead of --delay).")] = None,
    priority: Annotated[int | None, typer.Option(help="Lower runs first.", **whole())] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts in all.",
                                                     **whole())] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Enqueue a NAME no worker has registered (yet).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print {\"id\", \"outcome\", \"key\"} as JSON.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Enqueue one job; prints its id and whether it was created or deduped.

    The job goes to the queue its workers registered for NAME (see `sqljobs describe`),
    unless --queue says otherwise. A NAME no worker has registered is refused unless
    --force: no worker would run it.
    """
    if key == "":  # an empty key is refused by the engine: never replaced by a fresh one
        raise typer.BadParameter("an idempotency key cannot be empty (leave --key out for "
                                 "a fresh key)", param_hint="'--key'")
    value = json_option(payload, "--payload")
    with connected_client(dsn) as client:
        queue = _queue_for(client, name, queue, force)
        spec = JobSpec(name=name, key=fresh_key() if key is None else key, payload=value,
                       queue=queue, delay_s=delay, run_at=run_at, priority=priority,
                       tenant=tenant, max_attempts=max_attempts)
        done = client.run(queries.enqueue_spec(spec))
    if as_json:
        print(json.dumps({"id": done.id, "outcome": done.outcome, "key": spec.key}))
    else:
        print(f"{done.outcome} job {done.id} {name} (key {spec.key})")


def _queue_for(client: Client, name: str, queue: str | None, force: bool) -> str | None:
    """The queue to enqueue NAME on: --queue, else the one its workers registered."""
    try:
        declared = {t.name: t for t in client.run(introspection.job_types())}.get(name)
    except psycopg.errors.InsufficientPrivilege as error:
        err_console.print(f"[yellow]warning:[/yellow] cannot read the job-type registry "
                          f"({escape(str(error).splitlines()[0])}): the queue is not checked",
                          soft_wrap=True, highlight=False)
        return queue
    if declared is None:
        if not force:
            err_console.print(
                f"[red]error:[/red] no worker has registered a job named {escape(name)!r}, so "
                "none would run it (workers register the jobs they declare as they start; "
                "`sqljobs describe APP` lists an app's). Pass --force to enqueue it anyway.",
                soft_wrap=True, highlight=False)
            raise typer.Exit(1)
        return queue
    if queue is not None and declared.queue is not None and queue != declared.queue:
        err_console.print(
            f"[yellow]warning:[/yellow] {escape(name)!r} is served on queue "
            f"{escape(declared.queue)!r}; a worker of queue {escape(queue)!r} must run it",
            soft_wrap=True, highlight=False)
    return queue if queue is not None else declared.queue
