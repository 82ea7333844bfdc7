"""`sqljobs enqueue NAME`: one job from the command line (as `celery call` or
`procrastinate defer` do), through the same `jobs.enqueue` every producer calls.

Exit codes: 0 the job exists (created, deduped or debounced), 1 the engine refused the
spec (its SQLSTATE and message on stderr), 2 bad usage (a payload that is not JSON).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer

from sqljobs import fresh_key
from sqljobs.cli.common import DsnOption, connected_client, err_console
from sqljobs.client import queries
from sqljobs.client.records import JobSpec


def enqueue(
    name: Annotated[str, typer.Argument(help="The job's name (as its workers declare it).")],
    payload: Annotated[str, typer.Option(help="The payload, a JSON object.")] = "{}",
    key: Annotated[str | None, typer.Option(
        help="The idempotency key: a second enqueue with it answers the same job "
             "(deduped). Default: a fresh key, so every call makes a new job.")] = None,
    queue: Annotated[str | None, typer.Option(help="Queue (default: the engine's).")] = None,
    delay: Annotated[float | None, typer.Option(
        help="Seconds from now (database clock) before it may run.")] = None,
    run_at: Annotated[datetime | None, typer.Option(
        help="When it may run (ISO 8601; instead of --delay).")] = None,
    priority: Annotated[int | None, typer.Option(help="Lower runs first.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts in all.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print {\"id\", \"outcome\", \"key\"} as JSON.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Enqueue one job; prints its id and whether it was created or deduped."""
    try:
        value: Any = json.loads(payload)
    except json.JSONDecodeError as error:
        err_console.print(f"[red]error:[/red] --payload is not JSON: {error}")
        raise typer.Exit(2) from error
    spec = JobSpec(name=name, key=key or fresh_key(), payload=value, queue=queue,
                   delay_s=delay, run_at=run_at, priority=priority, tenant=tenant,
                   max_attempts=max_attempts)
    with connected_client(dsn) as client:
        done = client.run(queries.enqueue_spec(spec))
    if as_json:
        print(json.dumps({"id": done.id, "outcome": done.outcome, "key": spec.key}))
    else:
        print(f"{done.outcome} job {done.id} {name} (key {spec.key})")
