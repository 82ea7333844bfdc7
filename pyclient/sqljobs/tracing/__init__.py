"""OpenTelemetry tracing for sqljobs: the `tracing` extra (`pip install 'sqljobs[tracing]'`).

    from sqljobs.tracing import TracingObserver, instrument

    instrument()                                   # producers: a span per enqueue,
                                                   # its context stored on the job
    Worker(app, observers=[TracingObserver()])     # workers: a span per run, steps
                                                   # as child spans, parks as events

or `sqljobs worker --tracing`, which does both. Spans go to the globally configured
TracerProvider (the user's SDK setup, or `opentelemetry-instrument`), unless one is
given. The core package never imports this one: with tracing off an enqueue pays one
global read and a run pays the observers' empty loop (docs/howto-tracing.md).
"""

from __future__ import annotations

try:
    import opentelemetry.trace  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "sqljobs.tracing needs OpenTelemetry: install the tracing extra, "
        "pip install 'sqljobs[tracing]' (opentelemetry-api)") from error

from sqljobs.tracing._conventions import MESSAGING_SYSTEM
from sqljobs.tracing._observer import TracingObserver
from sqljobs.tracing._producer import (
    instrument,
    is_instrumented,
    provider_configured,
    uninstrument,
)

__all__ = ["MESSAGING_SYSTEM", "TracingObserver", "instrument", "is_instrumented",
           "provider_configured", "uninstrument"]
