"""`sqljobs describe`: the catalog of declared jobs and tasks, for people and admin tools.

With `--app module:attr` it reads the app's declarations (sqljobs._declare.catalog):
jobs with queue, retry, timeout, limits, cron, payload JSON schema and the sensitive
and personal paths of their models, then tasks and limits. Without `--app` it reads the
job-type registry the workers wrote (jobs.job_types()), which also knows the types
only SQL services register. `--personal-data` lists only the jobs whose payload holds
personal data, and where (with `--app` absent, how many such jobs are stored).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from sqljobs._app.backfills import Backfill
from sqljobs._cli import output
from sqljobs._cli.common import DsnOption, connected_client, load_app
from sqljobs._cli.output import JsonOption, Listing
from sqljobs._client import introspection
from sqljobs._declare.catalog import catalog, personal_data


def _paths(paths: list[str]) -> str:
    return ", ".join(paths)


def _from_database(dsn: str | None, personal_only: bool) -> dict[str, Any]:
    with connected_client(dsn) as client:
        if personal_only:
            rows = client.run(introspection.personal_data())
            return {"personal_data": [{"name": r.name, "personal": r.personal_paths,
                                       "stored_jobs": r.jobs} for r in rows]}
        types = client.run(introspection.job_types())
    return {"jobs": [{"name": t.name, "queue": t.queue, "retry": t.retry,
                      "timeout_s": t.timeout_s, "sensitive": t.sensitive_paths,
                      "personal": t.personal_paths, "payload_schema": t.payload_schema,
                      "origin": t.origin} for t in types]}


def _backfill(b: Backfill) -> dict[str, Any]:
    return {"name": b.name, "source": b.source, "key": list(b.key),
            "pages": None if b.pages is None else getattr(b.pages, "__qualname__", "pages"),
            "batch": b.batch, "count": b.count, "rate": b.rate,
            "environments": None if b.environments is None else list(b.environments),
            "requires": list(b.requires), "checksum": b.checksum}


def describe(
    app: Annotated[str | None, typer.Option(
        "--app", help="The app to describe, as module:attribute (default: the job types "
                      "registered in the database).")] = None,
    personal: Annotated[bool, typer.Option(
        "--personal-data", help="Only the jobs whose payload holds personal data, and "
                                "the paths (for a data-subject export or erase).")] = False,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """Describe the declared jobs and tasks: queue, payload schema, retry, timeout,
    limits, cron, the sensitive and personal fields of each payload, and the
    backfills (source, batch, count, rate, environments, requires, checksum)."""
    if app is not None:
        application = load_app(app)
        found = ({"personal_data": personal_data(application)} if personal
                 else catalog(application))
        if not personal and application.backfills:
            found["backfills"] = [_backfill(h.backfill) for h in application.backfills.values()]
        if not personal and application.factories:
            found["factories"] = [{"name": name, **settings}
                                  for name, settings in application.factories.items()]
    else:
        found = _from_database(dsn, personal)
    if as_json:
        output.emit_json(found)
        return
    if personal:
        table = Listing("job", "personal data", title="jobs holding personal data")
        for row in found["personal_data"]:
            table.add_row(row["name"], _paths(row["personal"]))
        output.show(table)
        return
    jobs = Listing("job", "queue", "retry", "timeout (s)", "limits", "cron", "sensitive",
                 "personal", title="jobs")
    for job in found["jobs"]:
        cron = job.get("cron")
        jobs.add_row(job["name"], job["queue"] or "(default)",
                     json.dumps(job["retry"]) if job["retry"] else "(default)",
                     "" if job["timeout_s"] is None else f"{job['timeout_s']:g}",
                     ", ".join(job.get("limits") or ()),
                     f"{cron['cron']} ({cron['timezone']})" if cron else "",
                     _paths(job["sensitive"]), _paths(job["personal"]))
    tasks = limits = backfills = factories = None
    if found.get("tasks"):
        tasks = Listing("task", "job", "cron", "timezone", "catch up", title="tasks")
        for task in found["tasks"]:
            tasks.add_row(task["name"], task["job"], task["cron"], task["timezone"],
                          task["catch_up"])
    if found.get("limits"):
        limits = Listing("limit", "scope", "target", "concurrency", "rate", title="limits")
        for limit in found["limits"]:
            rate = limit.get("rate")
            limits.add_row(limit["name"], limit["scope"], limit.get("target") or "",
                           limit.get("concurrency"),
                           f"{rate['n']}/{rate['per_s']:g}s" if rate else "")
    if found.get("backfills"):
        backfills = Listing("backfill", "source", "batch", "count", "rate (/s)",
                            "environments", "requires", "checksum", title="backfills")
        for b in found["backfills"]:
            backfills.add_row(b["name"], b["source"] or f"pages={b['pages']}", b["batch"],
                              b["count"], b["rate"], ", ".join(b["environments"] or ["(any)"]),
                              ", ".join(b["requires"]), b["checksum"][:12])
    if found.get("factories"):
        factories = Listing("job", "factory", "settings", title="data factories")
        for f in found["factories"]:
            settings = {k: v for k, v in f.items() if k not in ("name", "kind")}
            factories.add_row(f["name"], f["kind"], json.dumps(settings))
    output.show(jobs, tasks, limits, backfills, factories)
    if output.is_terminal():
        output.say("payload schemas: sqljobs describe --json")


__all__ = ["describe"]
