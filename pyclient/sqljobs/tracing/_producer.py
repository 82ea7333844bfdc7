"""The producer side: a span around every enqueue, its context stored on the job.

`instrument()` installs a hook (sqljobs._client.producing) that every enqueue path goes
through: `JobHandle.enqueue`/`enqueue_many`/`stage`/`stage_many` (and their async
forms), and a step's `invoke`. Around the write it opens one PRODUCER span,
`send <queue>`, a child of whatever span is current, and gives each spec that has no
`traceparent` of its own that span's W3C traceparent. One span per call, not per job:
an `enqueue_many` of 10,000 jobs is one span whose context all of them carry (the
messaging conventions let a batch share one creation context), so tracing a batch costs
one span and a copy of each spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import Token
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sqljobs._client import producing
from sqljobs._client.producing import Operation, Sending
from sqljobs._client.records import JobSpec
from sqljobs.tracing import _conventions as c

_PROPAGATOR = TraceContextTextMapPropagator()


def traceparent_of(span: Span) -> str | None:
    """The W3C traceparent of `span`, or None for an invalid (non-recording) context."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


class _TracedSending(Sending):
    __slots__ = ("_span", "_token", "_tracer")

    def __init__(self, tracer: Tracer, operation: Operation, specs: Sequence[JobSpec]) -> None:
        super().__init__(operation, specs)
        self._tracer = tracer
        self._span: Span | None = None
        self._token: Token[Context] | None = None

    def __enter__(self) -> Sending:
        specs = self.specs
        queues = {c.queue_of(spec) for spec in specs}
        names = {spec.name for spec in specs}
        queue = next(iter(queues)) if len(queues) == 1 else "(several)"
        attributes: dict[str, str | int] = {
            c.SYSTEM: c.MESSAGING_SYSTEM, c.OPERATION_TYPE: "send",
            c.OPERATION_NAME: self.operation}
        if len(queues) == 1:
            attributes[c.DESTINATION] = queue
        if len(names) == 1:
            attributes[c.JOB_NAME] = next(iter(names))
        if len(specs) != 1:
            attributes[c.BATCH_COUNT] = len(specs)
        actor = c.specs_actor(specs)
        if actor is not None:
            attributes[c.ACTOR] = actor
        span = self._tracer.start_span(f"send {queue}", kind=SpanKind.PRODUCER,
                                       attributes=attributes, record_exception=False,
                                       set_status_on_exception=False)
        self._span = span
        # current while the write runs, so a database instrumentation nests under it
        self._token = otel_context.attach(trace.set_span_in_context(span))
        traceparent = traceparent_of(span)
        if traceparent is not None:
            self.specs = [spec if spec.traceparent is not None
                          else spec.model_copy(update={"traceparent": traceparent})
                          for spec in specs]
        return self

    def enqueued(self, ids: Sequence[int]) -> None:
        if self._span is not None and len(ids) == 1:
            self._span.set_attribute(c.MESSAGE_ID, str(ids[0]))
            self._span.set_attribute(c.JOB_ID, ids[0])

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        span, self._span = self._span, None
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if span is None:
            return
        if exc_type is not None:
            # the type only: an error's text may quote the payload
            kind = f"{exc_type.__module__}.{exc_type.__qualname__}"
            span.set_attribute(c.ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, exc_type.__name__))
        span.end()


class TracingProducer:
    """The producer hook `instrument()` installs (sqljobs._client.producing)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(c.TRACER_NAME, tracer_provider=tracer_provider)

    def sending(self, operation: Operation, specs: Sequence[JobSpec]) -> Sending:
        return _TracedSending(self.tracer, operation, specs)


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Trace every enqueue of this process: a PRODUCER span per call, whose context the
    jobs store as their traceparent, so their runs join the trace. Spans go to
    `tracer_provider`, or the global one. Call it once at start-up, in producers and in
    workers alike (so that jobs a handler enqueues or invokes join the run's trace);
    calling it again replaces the provider."""
    producing.install(TracingProducer(tracer_provider))


def uninstrument() -> None:
    """Stop tracing enqueues (when this package's hook is the installed one)."""
    if isinstance(producing.installed(), TracingProducer):
        producing.install(None)


def is_instrumented() -> bool:
    return isinstance(producing.installed(), TracingProducer)


def provider_configured() -> bool:
    """Whether a global TracerProvider is set (by the SDK's setup, or
    `opentelemetry-instrument`): with none, the API's spans go nowhere."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


__all__ = ["TracingProducer", "instrument", "is_instrumented", "provider_configured",
           "traceparent_of", "uninstrument"]
