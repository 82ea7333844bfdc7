"""Schedules at run time: add, pause, resume, remove and list (`app.schedules`).

    app.schedules.add("nightly-report", job="reports.build", cron="0 2 * * *",
                      timezone="Europe/Paris", payload={"kind": "full"})
    app.schedules.pause("nightly-report")
    for s in app.schedules.list(): print(s.name, s.next_fire_at)

Schedules live in `jobs.schedule`; a running scheduler picks changes up on its next
round. Declared tasks (`@app.task`) are schedules too, written by the scheduler when it
starts (`sync_declared`). `add` checks the cron expression and time zone first, and when
the app declares the job, validates the payload with its model and takes its queue and
retry policy as the defaults of each occurrence.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sqljobs._client import queries
from sqljobs._client.errors import ConfigurationError
from sqljobs._client.records import ScheduleRecord
from sqljobs._declare.cron import Cron
from sqljobs._declare.redaction import payload_json
from sqljobs._declare.tasks import check_catch_up

if TYPE_CHECKING:
    from sqljobs._declare.protocols import Deployed

_NOT_OPTIONS = ("name", "key", "payload", "run_at", "delay_s", "on_conflict")


def with_next_fire(record: ScheduleRecord, now: datetime) -> ScheduleRecord:
    """The record with `next_fire_at`: the first occurrence after max(watermark, now)."""
    if record.paused:
        return record
    try:
        cron = Cron(record.cron, record.timezone)
    except ConfigurationError:
        return record
    return record.model_copy(update={"next_fire_at": cron.next_after(max(record.watermark, now))})


class Schedules:
    """The schedules of an app's database (runs on the app's pool)."""

    def __init__(self, app: Deployed) -> None:
        self.app = app

    def add(
        self,
        name: str,
        *,
        job: str,
        cron: str,
        timezone: str = "UTC",
        catch_up: str = "latest",
        payload: BaseModel | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> bool:
        """Add the schedule `name` (or replace its definition); True when it is new.

        A new schedule fires from now on, never the past. `options` are enqueue options
        of each occurrence (queue, priority, max_attempts, ...).
        """
        checked = Cron(cron, timezone)
        policy = check_catch_up(catch_up)
        if refused := sorted(set(options) & set(_NOT_OPTIONS)):
            raise ConfigurationError(f"a schedule's options cannot set {', '.join(refused)}")
        if job in self.app.jobs:
            spec = self.app.job_handle(job).spec(payload if payload is not None else {},
                                                 key="-", **options).to_sql()
        else:
            body = payload_json(payload) if isinstance(payload, BaseModel) else payload
            spec = {**options, "payload": dict(body or {})}
        definition = {
            "job": job, "cron": checked.expression, "timezone": checked.timezone,
            "catch_up": policy, "payload": spec.get("payload") or {},
            "options": {k: v for k, v in spec.items() if k not in ("name", "key", "payload")},
        }
        return bool(self.app.client.run(queries.schedule_put(name, definition)))

    def pause(self, name: str) -> None:
        """Stop firing `name` (raises ScheduleNotFound)."""
        self.app.client.run(queries.schedule_pause(name))

    def resume(self, name: str) -> None:
        """Fire `name` again from now; what it missed while paused is skipped."""
        self.app.client.run(queries.schedule_resume(name))

    def remove(self, name: str) -> None:
        """Delete `name` (raises ScheduleNotFound); jobs it enqueued stay."""
        self.app.client.run(queries.schedule_remove(name))

    def list(self) -> list[ScheduleRecord]:
        """Every schedule, with its next fire time."""
        client = self.app.client
        now = client.run(queries.database_now())
        return [with_next_fire(record, now) for record in client.run(queries.schedules())]

    def sync_declared(self) -> int:
        """Write every declared task's schedule (keeps paused state and watermark);
        answers how many were new."""
        client = self.app.client
        return sum(bool(client.run(queries.schedule_put(task.name, task.definition())))
                   for task in self.app.tasks.values())


__all__ = ["Schedules", "with_next_fire"]
