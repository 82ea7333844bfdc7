"""The actor, from Python end to end: who asked for a job is stored with it, read by its
handler as `ctx.actor`, inherited by what the run enqueues, stages, emits and invokes
(an explicit actor wins), shown by `get_job`/`list_jobs`, carried on the tracing spans,
and refused with InvalidActor (SJ023) before any write when malformed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from sqljobs import App, InvalidActor, JobContext, fresh_key, queries
from sqljobs.testing import drain, perform
from sqljobs.tracing import TracingObserver, instrument, uninstrument
from tests.processes import wait_for
from tests.worker_helpers import running


class Nothing(BaseModel):
    pass


def actors(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    """{key: actor} of the jobs of `name`, as jobs.job_view shows them."""
    return dict(conn.execute("select key, actor from jobs.job_view where name = %s",
                             (name,)).fetchall())


def test_the_actor_reaches_the_handler_and_everything_its_run_writes(
        conn: psycopg.Connection[Any], db_dsn: str) -> None:
    app = App(db_dsn)
    seen: dict[str, Any] = {}

    @app.job(name="actor.child", queue="actor_q")
    def child(ctx: JobContext, payload: Nothing) -> None:
        seen[f"child:{ctx.key}"] = ctx.actor

    @app.job(name="actor.follow", queue="actor_q")
    def follow(ctx: JobContext, payload: Nothing) -> None:
        seen[f"follow:{ctx.key}"] = ctx.actor

    @app.job(name="actor.report", queue="actor_q")
    def report(ctx: JobContext, payload: Nothing) -> None:
        seen["report"] = ctx.actor
        ctx.step.invoke("child", child, {})
        follow.enqueue({}, key=f"inherited-{ctx.job_id}")
        follow.enqueue({}, key=f"explicit-{ctx.job_id}", actor="service:billing")
        follow.stage({}, key=f"staged-{ctx.job_id}")
        app.emit_event("actor.done", {"job": ctx.job_id})

    try:
        first = report.as_({"user": "42", "via": "api"}).enqueue({}, key="r1").id
        drain(app)
        job = app.client.run(queries.get_job(first))
    finally:
        app.close()

    who = {"user": "42", "via": "api"}
    assert seen["report"] == who
    assert seen[f"child:{first}:child"] == who, "a step.invoke child inherits it"
    assert seen[f"follow:inherited-{first}"] == who, "an in-run enqueue inherits it"
    assert seen[f"follow:explicit-{first}"] == "service:billing", "an explicit actor wins"
    assert actors(conn, "actor.report") == {"r1": who}
    assert conn.execute("select spec->'actor' from jobs.outbox where key = %s",
                        (f"staged-{first}",)).fetchone() == (who,), "a staged job carries it"
    assert conn.execute("select actor from jobs.event where name = 'actor.done'"
                        ).fetchone() == (who,), "an event emitted in the run carries it"
    assert job is not None and job.actor == who, "get_job shows it"


def test_enqueue_takes_an_actor_and_a_handle_keeps_it(conn: psycopg.Connection[Any],
                                                      db_dsn: str) -> None:
    app = App(db_dsn)

    @app.job(name="actor.plain", queue="actor_p")
    def plain(ctx: JobContext, payload: Nothing) -> None:
        pass

    try:
        plain.enqueue({}, key="a", actor="user:1")
        bound = plain.as_("user:2")
        bound.enqueue({}, key="b")
        bound.enqueue_many([({}, "c"), ({}, "d")])
        bound.enqueue({}, key="e", actor="user:3")  # the option wins over as_()
        plain.enqueue({}, key="f")  # as_() made a new handle: this one names no actor
        assert actors(conn, "actor.plain") == {
            "a": "user:1", "b": "user:2", "c": "user:2", "d": "user:2", "e": "user:3",
            "f": None}
        listed = {j.key: j.actor
                  for j in app.client.run(queries.list_jobs(name="actor.plain"))}
        assert listed["b"] == "user:2" and listed["f"] is None
    finally:
        app.close()


@pytest.mark.parametrize("bad", [42, "", {}, ["user"], "x" * 600])
def test_a_malformed_actor_is_refused_and_nothing_is_written(
        conn: psycopg.Connection[Any], db_dsn: str, bad: Any) -> None:
    app = App(db_dsn)

    @app.job(name="actor.bad", queue="actor_b")
    def job(ctx: JobContext, payload: Nothing) -> None:
        pass

    try:
        with pytest.raises(InvalidActor) as refused:
            job.enqueue({}, key=fresh_key(), actor=bad)
        assert refused.value.sqlstate == "SJ023"
        with pytest.raises(InvalidActor):
            job.as_(bad).enqueue_many([({}, fresh_key()), ({}, fresh_key())])
        with pytest.raises(InvalidActor):
            app.emit_event("actor.bad", {}, actor=bad)
    finally:
        app.close()
    assert conn.execute("select count(*) from jobs.job where name = 'actor.bad'"
                        ).fetchone() == (0,)


def test_perform_gives_the_handler_an_actor() -> None:
    app = App("postgresql://unused")

    @app.job(name="actor.perform")
    def whoami(ctx: JobContext, payload: Nothing) -> Any:
        return ctx.actor

    assert perform(whoami, {}, actor={"user": "7"}) == {"user": "7"}
    assert perform(whoami, {}) is None


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrument(tracer_provider=provider)
    try:
        yield provider, spans
    finally:
        uninstrument()
        provider.shutdown()


def test_the_spans_carry_the_actor(conn: psycopg.Connection[Any], db_dsn: str,
                                   exporter: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, spans = exporter
    app = App(db_dsn)

    @app.job(name="actor.traced", queue="actor_t")
    async def traced(ctx: JobContext, payload: Nothing) -> None:
        pass

    try:
        job_id = traced.as_({"user": "42"}).enqueue({}, key="t").id
        with running(app, queues=["actor_t"], observers=[TracingObserver(provider)]):
            wait_for(lambda: conn.execute("select state::text from jobs.job where id = %s",
                                          (job_id,)).fetchone() == ("succeeded",),
                     "the traced job succeeded")
    finally:
        app.close()
    by_kind = {s.kind: dict(s.attributes or {}) for s in spans.get_finished_spans()
               if (s.attributes or {}).get("sqljobs.job.id") == job_id}
    assert by_kind[SpanKind.PRODUCER]["sqljobs.actor"] == '{"user":"42"}'
    assert by_kind[SpanKind.CONSUMER]["sqljobs.actor"] == '{"user":"42"}'
