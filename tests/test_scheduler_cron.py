"""Cron at declaration and in time: bad input refused, seconds, DST days, catch-up plans.

No database here: `sqljobs.cron.Cron`, `@app.task` validation and
`sqljobs.scheduler.plan_fire` are pure.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel

from sqljobs import App, ConfigurationError, InvalidPayload, JobContext
from sqljobs._declare.cron import Cron
from sqljobs._runtime.scheduler import plan_fire

PARIS = ZoneInfo("Europe/Paris")


class Report(BaseModel):
    days: int


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(("cron", "timezone", "message"), [
    ("61 * * * *", "UTC", "bad cron expression '61 * * * *'"),
    ("* * * *", "UTC", "bad cron expression"),
    ("every five minutes", "UTC", "bad cron expression"),
    ("", "UTC", "cron must be a cron expression"),
    ("*/5 * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ("*/5 * * * *", "", "timezone must be an IANA zone name"),
])
def test_a_bad_cron_or_timezone_is_refused_at_declaration(cron: str, timezone: str,
                                                          message: str) -> None:
    app = App("postgresql://unused")
    with pytest.raises(ConfigurationError, match=message.replace("*", r"\*")):
        @app.task(cron=cron, timezone=timezone)
        def task(ctx: JobContext) -> None: ...
    assert app.jobs == {} and app.tasks == {}, "nothing is declared"


def test_a_bad_policy_or_payload_is_refused_at_declaration() -> None:
    app = App("postgresql://unused")
    with pytest.raises(ConfigurationError, match="catch_up must be one of all, latest, none"):
        app.task(cron="* * * * *", catch_up="some")

    with pytest.raises(InvalidPayload):
        @app.task(cron="0 2 * * *", name="report", payload={"days": "many"})
        def report(ctx: JobContext, payload: Report) -> None: ...
    assert app.tasks == {}


def test_a_task_is_a_job_with_a_schedule() -> None:
    app = App("postgresql://unused")

    @app.task(cron="0  2 * * *", timezone="Europe/Paris", catch_up="all", queue="reports",
              name="report", payload={"days": 7}, priority=3)
    def report(ctx: JobContext, payload: Report) -> int:
        return payload.days

    @app.task(cron="*/10 * * * * *", name="tick")
    async def tick(ctx: JobContext) -> None: ...

    assert set(app.jobs) == {"report", "tick"}
    task = app.tasks["report"]
    assert task.definition() == {
        "job": "report", "cron": "0 2 * * *", "timezone": "Europe/Paris", "catch_up": "all",
        "options": task.options, "payload": {"days": 7}, "origin": "declared"}
    assert task.options["queue"] == "reports" and task.options["priority"] == 3
    assert app.tasks["tick"].cron.has_seconds
    assert app.jobs["tick"].definition.is_async
    assert report(None, Report(days=2)) == 2  # still callable inline
    with pytest.raises(ConfigurationError, match="already declared"):
        app.task(cron="* * * * *", name="report")(lambda ctx: None)


def test_seconds_resolution() -> None:
    cron = Cron("*/15 * * * * *")
    assert cron.between(utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 1, 0)) == [
        utc(2026, 1, 1, 0, 0, s) for s in (15, 30, 45)] + [utc(2026, 1, 1, 0, 1, 0)]
    assert cron.latest(utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 44, 999)) == utc(2026, 1, 1, 0, 0, 30)
    assert cron.latest(utc(2026, 1, 1, 0, 0, 30), utc(2026, 1, 1, 0, 0, 44)) is None


def test_spring_forward_in_paris() -> None:
    """29 March 2026: 02:00 CET jumps to 03:00 CEST. 02:30 does not exist that day."""
    daily = Cron("30 2 * * *", "Europe/Paris")
    fired = daily.between(utc(2026, 3, 27, 12), utc(2026, 3, 30, 12))
    # cronsim fires the nonexistent 02:30 at the first instant after the gap, 03:00 CEST.
    assert [f.astimezone(PARIS).strftime("%d %H:%M %Z") for f in fired] == [
        "28 02:30 CET", "29 03:00 CEST", "30 02:30 CEST"]
    assert fired[1] == utc(2026, 3, 29, 1, 0)
    half_hourly = Cron("*/30 * * * *", "Europe/Paris")
    night = half_hourly.between(utc(2026, 3, 29, 0, 0), utc(2026, 3, 29, 2, 0))
    # 01:30 CET, then straight to 03:00 CEST: the hour that does not exist is not fired.
    assert [f.astimezone(PARIS).strftime("%H:%M") for f in night] == [
        "01:30", "03:00", "03:30", "04:00"]
    assert night[1] - night[0] == timedelta(minutes=30)


def test_fall_back_in_paris() -> None:
    """25 October 2026: 03:00 CEST goes back to 02:00 CET. 02:30 happens twice."""
    daily = Cron("30 2 * * *", "Europe/Paris")
    fired = daily.between(utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    # A daily occurrence in the repeated hour fires once, on the first pass (CEST).
    assert [f.astimezone(PARIS).strftime("%d %H:%M %Z") for f in fired] == [
        "25 02:30 CEST", "26 02:30 CET"]
    half_hourly = Cron("*/30 * * * *", "Europe/Paris")
    night = half_hourly.between(utc(2026, 10, 24, 23, 15), utc(2026, 10, 25, 2, 0))
    # Every-30-minutes fires in both passes: 02:00 and 02:30 CEST, then CET, 30 min apart.
    assert [f.astimezone(PARIS).strftime("%H:%M %Z") for f in night] == [
        "01:30 CEST", "02:00 CEST", "02:30 CEST", "02:00 CET", "02:30 CET", "03:00 CET"]
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(night))


OUTAGE_START = utc(2026, 5, 1, 10, 0, 0)
AFTER_OUTAGE = utc(2026, 5, 1, 11, 0, 30)  # one hour (and a half minute) later


def test_catch_up_plans_after_a_one_hour_outage() -> None:
    minutely = Cron("* * * * *")
    every = plan_fire(minutely, "all", OUTAGE_START, AFTER_OUTAGE, misfire_grace_s=5,
                      max_catch_up=1000)
    assert every.occurrences == [OUTAGE_START + timedelta(minutes=m) for m in range(1, 61)]
    assert every.watermark == AFTER_OUTAGE
    latest = plan_fire(minutely, "latest", OUTAGE_START, AFTER_OUTAGE, misfire_grace_s=5,
                       max_catch_up=1000)
    assert latest.occurrences == [utc(2026, 5, 1, 11, 0, 0)] and latest.skipped
    none = plan_fire(minutely, "none", OUTAGE_START, AFTER_OUTAGE, misfire_grace_s=5,
                     max_catch_up=1000)
    assert none.occurrences == [] and none.skipped and none.watermark == AFTER_OUTAGE
    on_time = plan_fire(minutely, "none", OUTAGE_START, utc(2026, 5, 1, 11, 0, 3),
                        misfire_grace_s=5, max_catch_up=1000)
    assert on_time.occurrences == [utc(2026, 5, 1, 11, 0, 0)], "within the grace it still fires"
    capped = plan_fire(minutely, "all", OUTAGE_START, AFTER_OUTAGE, misfire_grace_s=5,
                       max_catch_up=25)
    assert len(capped.occurrences) == 25 and capped.watermark == capped.occurrences[-1]
    nothing = plan_fire(minutely, "latest", AFTER_OUTAGE, AFTER_OUTAGE + timedelta(seconds=10),
                        misfire_grace_s=5, max_catch_up=1000)
    assert not nothing.needed
