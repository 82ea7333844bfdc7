"""The worker side: a CONSUMER span per run, steps as its child spans, parks as events.

`TracingObserver` is a RunObserver (sqljobs._runtime.observing). Each run of a job is one
span, `process <queue>`, of kind CONSUMER. Its parent is the producer context the job
stores (`jobs.job.traceparent`), and it also links to that context:

* the messaging conventions require a link from a process span to the message's
  creation context (batch consumers cannot use parenthood), and allow the creation
  context as parent when one message is processed, which is what a run is;
* as a child, every attempt of a job, each parked-and-resumed run, and the runs of the
  jobs it invokes land in the producer's trace: a retry is a new span of the same trace
  (attribute `sqljobs.job.attempt`, and `sqljobs.job.claim` tells runs of one attempt
  apart), not a trace of its own.

A job without a traceparent (enqueued by SQL without one, fired by a schedule, or with
tracing off at enqueue) starts a new trace at its run; a malformed one is ignored the
same way.

The run span is current while the handler's task or thread is created, so the handler's
own spans (an HTTP client's, a database driver's) nest under it; durable steps are child
spans (`step <name>`, `sleep <name>`, `wait <name>`, `invoke <name>`,
`compensate sqljobs.undo:<name>`); a park and a replayed step are events on the run span.

Errors: the run's status and attributes come from the error record the worker wrote to
last_error (its kind, type and message, already cleaned and redacted), never from the
raw exception, and a step span records an exception's type only: no payload value
reaches a span.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sqljobs._client.records import ClaimedJob
from sqljobs._runtime.observing import RunObserver, RunWatch
from sqljobs.tracing import _conventions as c

_PROPAGATOR = TraceContextTextMapPropagator()


def producer_context(traceparent: str | None) -> tuple[Context, list[Link]]:
    """The context a run's span starts in (an empty one: a new trace) and its links."""
    if not traceparent:
        return Context(), []
    parent = _PROPAGATOR.extract({"traceparent": traceparent}, context=Context())
    span_context = trace.get_current_span(parent).get_span_context()
    if not span_context.is_valid:
        return Context(), []
    return parent, [Link(span_context)]


class TracingWatch(RunWatch):
    """One run as a span."""

    def __init__(self, span: Span, tracer: trace.Tracer) -> None:
        self.span = span
        self._tracer = tracer

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with trace.use_span(self.span, end_on_exit=False, record_exception=False,
                            set_status_on_exception=False):
            yield

    @contextlib.contextmanager
    def step(self, name: str, kind: str) -> Iterator[None]:
        # A child of the current span: the run's (the step runs in the handler's
        # context), or a span the handler opened around the step.
        with self._tracer.start_as_current_span(
                c.step_span_name(kind, name), kind=SpanKind.INTERNAL,
                attributes={c.STEP_NAME: name, c.STEP_KIND: kind},
                record_exception=False, set_status_on_exception=False) as span:
            try:
                yield
            except BaseException as error:
                kind_type = type(error)  # the type only: its text may quote the payload
                span.set_attribute(c.ERROR_TYPE,
                                   f"{kind_type.__module__}.{kind_type.__qualname__}")
                span.set_status(Status(StatusCode.ERROR, kind_type.__name__))
                raise

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self.span.add_event(f"sqljobs.{name}", c.event_attributes(attributes))

    def ended(self, label: str, error: Mapping[str, Any] | None, duration_s: float) -> None:
        span = self.span
        span.set_attribute(c.OUTCOME, label)
        if error:
            if error.get("kind"):
                span.set_attribute(c.ERROR_KIND, str(error["kind"]))
            span.set_attribute(c.ERROR_TYPE, str(error.get("type") or error.get("kind")))
        if label in c.FAILED_OUTCOMES:
            message = (error or {}).get("message") or label
            span.set_status(Status(StatusCode.ERROR, str(message)))
        span.end()


class TracingObserver(RunObserver):
    """Traces a worker's runs: `Worker(app, observers=[TracingObserver()])`.

    Spans go to `tracer_provider`, or the globally configured one."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(c.TRACER_NAME, tracer_provider=tracer_provider)

    def run_begins(self, job: ClaimedJob) -> RunWatch:
        parent, links = producer_context(job.traceparent)
        attributes: dict[str, str | int] = {
            c.SYSTEM: c.MESSAGING_SYSTEM, c.OPERATION_TYPE: "process",
            c.OPERATION_NAME: "process", c.DESTINATION: job.queue,
            c.MESSAGE_ID: str(job.id), c.JOB_ID: job.id, c.JOB_NAME: job.name,
            c.ATTEMPT: job.attempt, c.MAX_ATTEMPTS: job.max_attempts,
            c.CLAIM: job.claim,
        }
        actor = c.actor_attribute(job.actor)
        if actor is not None:
            attributes[c.ACTOR] = actor
        span = self.tracer.start_span(
            f"process {job.queue}", context=parent, kind=SpanKind.CONSUMER, links=links,
            attributes=attributes, record_exception=False, set_status_on_exception=False)
        return TracingWatch(span, self.tracer)


__all__ = ["TracingObserver", "TracingWatch", "producer_context"]
