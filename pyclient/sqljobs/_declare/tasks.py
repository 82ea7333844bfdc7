"""Task declarations: `@app.task(cron=...)` is a job declared with a schedule.

    @app.task(cron="*/5 * * * *", timezone="Europe/Paris", catch_up="latest", queue="reports")
    def refresh(ctx: JobContext) -> None: ...

The cron expression, the time zone and the catch-up policy are checked here, at
declaration (ConfigurationError names what is wrong), before anything is registered.
The job is an ordinary job (enqueue it by hand too); the scheduler (`sqljobs scheduler`)
stores the schedule in `jobs.schedule` under the task's name and enqueues one job per
occurrence. A handler takes `(ctx)` (the payload is empty) or `(ctx, payload)` with a
pydantic model, like any job; `payload=` gives the payload every occurrence carries.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict

from sqljobs._client.errors import ConfigurationError
from sqljobs._client.records import CatchUp
from sqljobs._declare.cron import Cron

CATCH_UP_POLICIES: tuple[str, ...] = get_args(CatchUp)


class NoPayload(BaseModel):
    """The payload of a task whose handler takes only `ctx`."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def check_catch_up(catch_up: str) -> CatchUp:
    if catch_up not in CATCH_UP_POLICIES:
        raise ConfigurationError(
            f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, not {catch_up!r}")
    return catch_up  # type: ignore[return-value]


@dataclass(frozen=True)
class TaskDefinition:
    """A declared schedule: `definition()` is what jobs.schedule_put stores."""

    name: str
    job: str
    cron: Cron
    catch_up: CatchUp
    payload: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def definition(self) -> dict[str, Any]:
        return {"job": self.job, "cron": self.cron.expression, "timezone": self.cron.timezone,
                "catch_up": self.catch_up, "options": dict(self.options),
                "payload": dict(self.payload), "origin": "declared"}


def adapt_handler(fn: Callable[..., Any]) -> tuple[Callable[..., Any], type[BaseModel] | None]:
    """A `(ctx)` handler as a `(ctx, payload)` one taking NoPayload; others unchanged."""
    if len(inspect.signature(fn).parameters) != 1:
        return fn, None
    if inspect.iscoroutinefunction(fn):
        async def run_async(ctx: Any, payload: NoPayload | None = None) -> Any:
            return await fn(ctx)
        wrapper: Callable[..., Any] = run_async
    else:
        def run(ctx: Any, payload: NoPayload | None = None) -> Any:
            return fn(ctx)
        wrapper = run
    # Name and docs of the handler, not its signature (no __wrapped__).
    functools.update_wrapper(wrapper, fn, updated=())
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    return wrapper, NoPayload


__all__ = ["CATCH_UP_POLICIES", "NoPayload", "TaskDefinition", "adapt_handler",
           "check_catch_up"]
