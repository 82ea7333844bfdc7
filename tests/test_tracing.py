"""OpenTelemetry tracing (sqljobs.tracing): one trace from enqueue through retries to success.

A real worker against the real database, spans collected by the SDK's in-memory exporter:
the producer span's context is what the job stores; every run is a CONSUMER span, child
of (and linked to) that context, so retries and resumed runs stay in one trace; steps are
child spans of their run, a park and a replay are events; a job enqueued by SQL with a
traceparent joins that trace; no span shows a payload value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy, fresh_key
from sqljobs._client import producing
from sqljobs.tracing import TracingObserver, instrument, is_instrumented, uninstrument
from tests.processes import wait_for
from tests.worker_helpers import running

SECRET = "4111-1111-SECRET-7777"
FAST_RETRY = RetryPolicy(max_attempts=5, base_s=0.05, cap_s=0.05, jitter="none")


class Card(BaseModel):
    number: str
    order: int


class Nothing(BaseModel):
    pass


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(tracer_provider=provider)
    try:
        yield provider, exporter
    finally:
        uninstrument()
        provider.shutdown()


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(exporter.get_finished_spans())


def runs_of(exporter: InMemorySpanExporter, job_id: int) -> list[ReadableSpan]:
    found = [s for s in finished(exporter) if s.kind is SpanKind.CONSUMER
             and (s.attributes or {}).get("sqljobs.job.id") == job_id]
    return sorted(found, key=lambda s: s.start_time or 0)


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    sid = parent.context.span_id if parent.context else None
    return sorted((s for s in finished(exporter) if s.parent and s.parent.span_id == sid),
                  key=lambda s: s.start_time or 0)


def traceparent_in_db(conn: psycopg.Connection[Any], job_id: int) -> str | None:
    row = conn.execute("select traceparent from jobs.job where id = %s", (job_id,)).fetchone()
    assert row is not None
    value: str | None = row[0]
    return value


def state_of(conn: psycopg.Connection[Any], job_id: int) -> str:
    row = conn.execute("select state::text from jobs.job where id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def make_app(dsn: str, provider: TracerProvider, queue: str) -> App:
    """A job that fails its 'charge' step on attempts 1 and 2, then sleeps (parks) once
    and succeeds; async and sync forms. Each opens a span of its own in the handler and
    one inside a step's function, to show where they nest."""
    app = App(dsn)
    tracer = provider.get_tracer("the-application")

    def charge(ctx: JobContext) -> str:
        with tracer.start_as_current_span("psp call"):
            if ctx.attempt < 3:
                raise ValueError("declined by the psp")
            return "charged"

    @app.job(name="traced.pay", queue=queue, retry=FAST_RETRY)
    async def pay(ctx: JobContext, card: Card) -> str:
        with tracer.start_as_current_span("handler work"):
            await ctx.step.run_async("prepare", lambda: card.order)
            result = await ctx.step.run_async("charge", lambda: charge(ctx))
            await ctx.step.sleep_async("cool-off", 0.3)
            return result

    @app.job(name="traced.pay_sync", queue=queue, retry=FAST_RETRY)
    def pay_sync(ctx: JobContext, card: Card) -> str:
        with tracer.start_as_current_span("handler work"):
            ctx.step.run("prepare", lambda: card.order)
            result: str = ctx.step.run("charge", lambda: charge(ctx))
            ctx.step.sleep("cool-off", 0.3)
            return result

    @app.job(name="traced.plain", queue=queue)
    async def plain(ctx: JobContext, payload: Nothing) -> None:
        return None

    return app


def span_text(span: ReadableSpan) -> str:
    """Everything a span says that could carry a value: its name, attributes, status,
    events with their attributes, links with theirs."""
    parts: list[Any] = [span.name, dict(span.attributes or {}), span.status.description]
    parts += [(e.name, dict(e.attributes or {})) for e in span.events]
    parts += [dict(link.attributes or {}) for link in span.links]
    return json.dumps(parts, default=str)


@pytest.mark.parametrize("job_name", ["traced.pay", "traced.pay_sync"])
def test_one_trace_from_enqueue_through_retries_and_a_park_to_success(
        db_dsn: str, conn: psycopg.Connection[Any],
        spans: tuple[TracerProvider, InMemorySpanExporter], job_name: str) -> None:
    provider, exporter = spans
    queue = "traced-" + job_name.rsplit(".", 1)[-1].replace("_", "-")
    app = make_app(db_dsn, provider, queue)
    try:
        job_id = app.job_handle(job_name).enqueue({"number": SECRET, "order": 7},
                                                  key=fresh_key()).id
        (producer,) = finished(exporter)
        with running(app, queues=[queue], observers=[TracingObserver(provider)]):
            wait_for(lambda: state_of(conn, job_id) == "succeeded", what="the job succeeded")
            wait_for(lambda: len(runs_of(exporter, job_id)) == 4, what="four run spans")
    finally:
        app.close()

    # The producer span, and its context stored on the job.
    assert producer.kind is SpanKind.PRODUCER
    assert producer.name == f"send {queue}"
    assert producer.parent is None
    ctx = producer.context
    assert ctx is not None
    attrs = dict(producer.attributes or {})
    assert attrs["messaging.system"] == "sqljobs"
    assert attrs["messaging.operation.type"] == "send"
    assert attrs["messaging.operation.name"] == "enqueue"
    assert attrs["messaging.destination.name"] == queue
    assert attrs["messaging.message.id"] == str(job_id)
    assert attrs["sqljobs.job.name"] == job_name
    assert traceparent_in_db(conn, job_id) == (
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}")

    # Four runs: attempts 1 and 2 fail, attempt 3 parks on the sleep, then resumes and
    # succeeds; each a CONSUMER span, child of the producer span and linked to it.
    runs = runs_of(exporter, job_id)
    assert [dict(r.attributes or {})["sqljobs.job.attempt"] for r in runs] == [1, 2, 3, 3]
    assert [dict(r.attributes or {})["sqljobs.run.outcome"] for r in runs] == [
        "retried", "retried", "parked", "succeeded"]
    claims = [dict(r.attributes or {})["sqljobs.job.claim"] for r in runs]
    assert len(set(claims)) == 4
    for run in runs:
        assert run.name == f"process {queue}"
        assert run.context is not None and run.context.trace_id == ctx.trace_id
        assert run.parent is not None and run.parent.span_id == ctx.span_id
        assert [link.context.span_id for link in run.links] == [ctx.span_id]
        run_attrs = dict(run.attributes or {})
        assert run_attrs["messaging.system"] == "sqljobs"
        assert run_attrs["messaging.operation.type"] == "process"
        assert run_attrs["messaging.destination.name"] == queue
        assert run_attrs["sqljobs.job.name"] == job_name
        assert run_attrs["sqljobs.job.max_attempts"] == 5
    for failed in runs[:2]:
        assert failed.status.status_code is StatusCode.ERROR
        assert failed.status.description == "declined by the psp"
        assert dict(failed.attributes or {})["error.type"] == "builtins.ValueError"
        assert dict(failed.attributes or {})["sqljobs.error.kind"] == "error"
    for fine in runs[2:]:
        assert fine.status.status_code is StatusCode.UNSET

    # The handler's own span nests under its run; steps nest under the handler's span
    # (the current one), and a step function's span under its step.
    def names(spans: Sequence[ReadableSpan]) -> list[str]:
        return [s.name for s in spans]

    for run in runs:
        assert names(children(exporter, run)) == ["handler work"]
    work = [children(exporter, run)[0] for run in runs]
    assert names(children(exporter, work[0])) == ["step prepare", "step charge"]
    assert names(children(exporter, work[1])) == ["step charge"]
    assert names(children(exporter, work[2])) == ["step charge", "sleep cool-off"]
    assert names(children(exporter, work[3])) == []
    charges = [children(exporter, w)[-1 if i < 2 else 0] for i, w in enumerate(work[:3])]
    assert [c.status.status_code for c in charges] == [
        StatusCode.ERROR, StatusCode.ERROR, StatusCode.UNSET]
    assert dict(charges[0].attributes or {}) == {
        "sqljobs.step.name": "charge", "sqljobs.step.kind": "run",
        "error.type": "builtins.ValueError"}
    for step in charges:
        assert names(children(exporter, step)) == ["psp call"]

    # Replays and the park are events on the run spans.
    def events(run: ReadableSpan) -> list[tuple[str, Any]]:
        return [(e.name, dict(e.attributes or {}).get("sqljobs.step.name")) for e in run.events]

    assert events(runs[0]) == []
    assert events(runs[1]) == [("sqljobs.replayed", "prepare")]
    assert events(runs[2]) == [("sqljobs.replayed", "prepare"), ("sqljobs.parked", "cool-off")]
    assert events(runs[3]) == [("sqljobs.replayed", "prepare"), ("sqljobs.replayed", "charge"),
                               ("sqljobs.replayed", "cool-off")]
    parked = dict(runs[2].events[1].attributes or {})
    assert parked["sqljobs.step.kind"] == "sleep" and "sqljobs.wake_at" in parked

    # Not one span says the payload's values.
    every = finished(exporter)
    assert all(s.context and s.context.trace_id == ctx.trace_id for s in every)
    for span in every:
        text = span_text(span)
        # the number and pieces of it that keep a dash: bare digits also occur in ids and
        # claim tokens (a claim of 11110197947 contains 1111)
        for piece in (SECRET, "4111-1111", "1111-SECRET", "SECRET-7777"):
            assert piece not in text, (span.name, piece)


def test_a_sql_enqueued_job_with_a_traceparent_joins_that_trace(
        db_dsn: str, conn: psycopg.Connection[Any],
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    queue = "traced-sql"
    app = make_app(db_dsn, provider, queue)
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    given = f"00-{trace_id}-{span_id}-01"

    def enqueue(options: dict[str, Any]) -> int:
        row = conn.execute("select id from jobs.enqueue('traced.plain', %s, '{}', %s)",
                           (fresh_key(), json.dumps({"queue": queue, **options}))).fetchone()
        assert row is not None
        return int(row[0])

    try:
        joined = enqueue({"traceparent": given})
        batch = conn.execute(
            "select id from jobs.enqueue_many(%s)",
            (json.dumps([{"name": "traced.plain", "key": fresh_key(), "queue": queue,
                          "traceparent": given}]),)).fetchone()
        assert batch is not None
        alone, garbled = enqueue({}), enqueue({"traceparent": "not-a-traceparent"})
        ids = [joined, int(batch[0]), alone, garbled]
        with running(app, queues=[queue], observers=[TracingObserver(provider)]):
            wait_for(lambda: all(len(runs_of(exporter, i)) == 1 for i in ids),
                     what="one run span per job")
    finally:
        app.close()

    assert traceparent_in_db(conn, joined) == given
    for job_id in ids[:2]:
        (run,) = runs_of(exporter, job_id)
        assert run.context is not None and f"{run.context.trace_id:032x}" == trace_id
        assert run.parent is not None and f"{run.parent.span_id:016x}" == span_id
        assert run.parent.is_remote
        assert [f"{link.context.span_id:016x}" for link in run.links] == [span_id]
    # No traceparent, or one that does not parse: the run starts a trace of its own.
    for job_id in ids[2:]:
        (run,) = runs_of(exporter, job_id)
        assert run.parent is None and not run.links
        assert run.context is not None and f"{run.context.trace_id:032x}" != trace_id


def test_invoked_children_and_batches_join_the_trace(
        db_dsn: str, conn: psycopg.Connection[Any],
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    queue = "traced-invoke"
    app = App(db_dsn)

    @app.job(name="traced.child", queue=queue)
    async def child(ctx: JobContext, card: Card) -> int:
        return card.order * 2

    @app.job(name="traced.parent", queue=queue)
    async def parent(ctx: JobContext, card: Card) -> list[int]:
        results: list[int] = await ctx.step.invoke_many_async(
            "kids", child, [{"number": card.number, "order": i} for i in (1, 2)])
        return results

    try:
        parent_id = parent.enqueue({"number": SECRET, "order": 0}, key=fresh_key()).id
        batch = child.enqueue_many([({"number": SECRET, "order": i}, fresh_key())
                                    for i in range(3)])
        with running(app, queues=[queue], observers=[TracingObserver(provider)]):
            wait_for(lambda: state_of(conn, parent_id) == "succeeded", what="the parent")
            wait_for(lambda: len(runs_of(exporter, parent_id)) == 2, what="two parent runs")
            wait_for(lambda: all(runs_of(exporter, e.id) for e in batch), what="batch runs")
        rows = conn.execute("select id, traceparent from jobs.job where name = 'traced.child' "
                            "and id <> all(%s)", ([e.id for e in batch],)).fetchall()
        kids = [row[0] for row in rows]
        assert len(kids) == 2
        wait_for(lambda: all(runs_of(exporter, k) for k in kids), what="the children's runs")
    finally:
        app.close()

    spans_now = finished(exporter)
    producers = [s for s in spans_now if s.kind is SpanKind.PRODUCER]
    assert sorted(dict(s.attributes or {})["messaging.operation.name"] for s in producers) == [
        "enqueue", "enqueue", "invoke", "invoke"]

    # The invoke: a step span of the parent's first run, the producer span inside it,
    # whose context both children carry; their runs are in the parent's trace. (The
    # resumed run invokes again to collect the outcomes: the same spans, and the
    # children, found by their keys, keep their first context.)
    first = runs_of(exporter, parent_id)[0]
    assert first.context is not None
    (invoke_step,) = children(exporter, first)
    assert invoke_step.name == "invoke kids"
    (invoke,) = children(exporter, invoke_step)
    assert invoke.kind is SpanKind.PRODUCER and invoke.name == f"send {queue}"
    assert invoke.parent is not None and invoke.parent.span_id == invoke_step.context.span_id
    assert dict(invoke.attributes or {})["messaging.batch.message_count"] == 2
    assert invoke.context is not None
    for kid in kids:
        (run,) = runs_of(exporter, kid)
        assert run.context is not None and run.context.trace_id == first.context.trace_id
        assert run.parent is not None and run.parent.span_id == invoke.context.span_id

    # enqueue_many: one producer span for the batch, every job carries its context.
    (batch_span,) = [s for s in producers if dict(s.attributes or {}).get(
        "messaging.batch.message_count") == 3]
    assert batch_span.context is not None
    tps = {traceparent_in_db(conn, e.id) for e in batch}
    bctx = batch_span.context
    assert tps == {f"00-{bctx.trace_id:032x}-{bctx.span_id:016x}-{bctx.trace_flags:02x}"}
    for span in spans_now:
        assert SECRET not in span_text(span), span.name


def test_an_enqueue_keeps_a_given_traceparent_and_off_means_none(
        db_dsn: str, conn: psycopg.Connection[Any],
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    app = make_app(db_dsn, provider, "traced-given")
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    try:
        handle = app.job_handle("traced.plain")
        kept = handle.enqueue({}, key=fresh_key(), traceparent=given).id
        # Inside a span of the caller's, the producer span is its child.
        with provider.get_tracer("caller").start_as_current_span("request") as request:
            nested = handle.enqueue({}, key=fresh_key()).id
        staged = handle.stage({}, key=fresh_key()).id  # the outbox row carries it to the job
        uninstrument()
        assert not is_instrumented() and producing.installed() is None
        off = handle.enqueue({}, key=fresh_key()).id
        # Instrumented, but no SDK behind the API (a no-op provider): nothing is stored.
        instrument(tracer_provider=trace.NoOpTracerProvider())
        noop = handle.enqueue({}, key=fresh_key()).id
    finally:
        app.close()
    assert traceparent_in_db(conn, kept) == given
    producer = next(s for s in finished(exporter)
                    if dict(s.attributes or {}).get("sqljobs.job.id") == nested)
    assert producer.parent is not None
    assert producer.parent.span_id == request.get_span_context().span_id
    stager = next(s for s in finished(exporter)
                  if dict(s.attributes or {}).get("sqljobs.job.id") == staged)
    assert dict(stager.attributes or {})["messaging.operation.name"] == "stage"
    row = conn.execute("select spec->>'traceparent' from jobs.outbox where id = %s",
                       (staged,)).fetchone()
    assert row is not None and stager.context is not None
    assert row[0] == f"00-{stager.context.trace_id:032x}-{stager.context.span_id:016x}-" \
                     f"{stager.context.trace_flags:02x}"
    assert traceparent_in_db(conn, off) is None
    assert traceparent_in_db(conn, noop) is None


def test_an_event_wait_parks_as_an_event_without_its_match_values(
        db_dsn: str, conn: psycopg.Connection[Any],
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    queue = "traced-wait"
    app = App(db_dsn)

    @app.job(name="traced.waits", queue=queue)
    async def waits(ctx: JobContext, card: Card) -> bool:
        paid = await ctx.step.wait_for_event_async("paid", event="traced.paid",
                                                   match={"card": card.number}, timeout=60)
        return paid is not None

    try:
        job_id = waits.enqueue({"number": SECRET, "order": 1}, key=fresh_key()).id
        with running(app, queues=[queue], observers=[TracingObserver(provider)]):
            wait_for(lambda: state_of(conn, job_id) == "parked", what="the job parked")
            app.emit_event("traced.paid", {"card": SECRET})
            wait_for(lambda: state_of(conn, job_id) == "succeeded", what="the job succeeded")
            wait_for(lambda: len(runs_of(exporter, job_id)) == 2, what="two run spans")
    finally:
        app.close()

    parked_run, resumed = runs_of(exporter, job_id)
    assert [s.name for s in children(exporter, parked_run)] == ["wait paid"]
    (parked,) = parked_run.events
    assert parked.name == "sqljobs.parked"
    assert dict(parked.attributes or {}) == {
        "sqljobs.step.name": "paid", "sqljobs.step.kind": "wait",
        "sqljobs.events": ("traced.paid",)}
    # Woken, the run asks again and gets the event that came: a wait span, no park.
    assert [s.name for s in children(exporter, resumed)] == ["wait paid"]
    assert resumed.events == ()
    for span in finished(exporter):
        assert SECRET not in span_text(span), span.name
