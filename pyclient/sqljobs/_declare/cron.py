"""Cron expressions in a time zone: validation and occurrences (on `cronsim`).

    Cron("*/5 * * * *", "Europe/Paris").between(after, until)   # after < t <= until, UTC

Five fields (minute hour day month weekday), or six with SECONDS FIRST
(`*/10 * * * * *` is every ten seconds). `L`, `W`, `#` and the `@daily` style aliases are
cronsim's. Occurrences are computed in the schedule's zone and answered in UTC.

Daylight saving time behaves as cronsim defines it (the behaviour of cronie, the Linux
cron daemon): on a spring-forward day an occurrence whose wall-clock time does not
exist fires at the first instant after the gap (`30 2 * * *` in Europe/Paris fires at
03:00 CEST); on a fall-back day a daily occurrence in the repeated hour fires once, on
the first pass, while an expression that matches every hour or minute fires in both
passes (tests/test_scheduler_cron.py pins both days).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from sqljobs._client.errors import ConfigurationError

_CHECK_FROM = datetime(2000, 1, 1, tzinfo=UTC)


def zone_of(timezone: str) -> ZoneInfo:
    """The IANA zone named; raises ConfigurationError naming the bad value."""
    if not isinstance(timezone, str) or not timezone.strip():
        raise ConfigurationError("timezone must be an IANA zone name, e.g. 'Europe/Paris'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ConfigurationError(
            f"unknown time zone {timezone!r}: use an IANA zone name, e.g. 'Europe/Paris' "
            f"or 'UTC'") from error


@dataclass(frozen=True)
class Cron:
    """A validated cron expression read in `timezone` (construction raises
    ConfigurationError for a bad expression or zone)."""

    expression: str
    timezone: str = "UTC"
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise ConfigurationError("cron must be a cron expression, e.g. '*/5 * * * *'")
        object.__setattr__(self, "expression", " ".join(self.expression.split()))
        object.__setattr__(self, "zone", zone_of(self.timezone))
        try:
            CronSim(self.expression, _CHECK_FROM.astimezone(self.zone))
        except CronSimError as error:
            raise ConfigurationError(
                f"bad cron expression {self.expression!r}: {error} (five fields: minute "
                f"hour day-of-month month day-of-week; or six with seconds first)") from error

    @property
    def has_seconds(self) -> bool:
        return len(self.expression.split()) == 6

    def _after(self, after: datetime) -> Iterator[datetime]:
        for local in CronSim(self.expression, _aware(after).astimezone(self.zone)):
            yield local.astimezone(UTC)

    def next_after(self, after: datetime) -> datetime:
        """The first occurrence strictly after `after`, in UTC."""
        return next(self._after(after))

    def between(self, after: datetime, until: datetime, limit: int | None = None) -> list[datetime]:
        """Occurrences t with after < t <= until, oldest first, at most `limit`, in UTC."""
        found: list[datetime] = []
        until = _aware(until)
        for occurrence in self._after(after):
            if occurrence > until or (limit is not None and len(found) >= limit):
                break
            found.append(occurrence)
        return found

    def latest(self, after: datetime, until: datetime) -> datetime | None:
        """The latest occurrence t with after < t <= until (searched backwards), in UTC."""
        start = _aware(until).replace(microsecond=0) + timedelta(seconds=1)
        for local in CronSim(self.expression, start.astimezone(self.zone), reverse=True):
            occurrence = local.astimezone(UTC)
            return occurrence if occurrence > _aware(after) else None
        return None


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("datetimes must be timezone-aware")
    return moment


__all__ = ["Cron", "zone_of"]
