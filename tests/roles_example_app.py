"""An example app the scheduler and relay tests run, in-process and as subprocesses.

    sqljobs relay tests.roles_example_app:app
    sqljobs scheduler tests.roles_example_app:app
    sqljobs worker tests.roles_example_app:app --with-relay --with-scheduler
"""

from __future__ import annotations

from pydantic import BaseModel

from sqljobs import App, JobContext


class Note(BaseModel):
    text: str = ""


def make_app(dsn: str | None = None) -> App:
    example = App(dsn)

    @example.job(name="roles.note", queue="roles")
    def note(ctx: JobContext, payload: Note) -> str:
        return payload.text

    # Every second, every missed second caught up: the scheduler process tests count them.
    @example.task(name="roles.tick", cron="* * * * * *", catch_up="all", queue="roles")
    def tick(ctx: JobContext) -> None:
        return None

    return example


app = make_app()
