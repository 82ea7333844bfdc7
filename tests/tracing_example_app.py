"""The app `sqljobs worker --tracing` serves in tests/test_tracing_cli.py.

    SQLJOBS_TEST_SPANS=/path/spans.jsonl sqljobs worker tests.tracing_example_app:app --tracing

It configures the global TracerProvider the way an application's start-up would, with
an exporter that appends each finished span to $SQLJOBS_TEST_SPANS as one JSON line
(trace id, span id, parent id, kind, name, attributes), so the test reads what the
worker process traced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from pydantic import BaseModel

from sqljobs import App, JobContext

QUEUE = "traced-cli"


class JsonLines(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                ctx, parent = span.context, span.parent
                out.write(json.dumps({
                    "trace_id": f"{ctx.trace_id:032x}" if ctx else None,
                    "span_id": f"{ctx.span_id:016x}" if ctx else None,
                    "parent_id": f"{parent.span_id:016x}" if parent else None,
                    "kind": span.kind.name, "name": span.name,
                    "attributes": dict(span.attributes or {})}) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLines(os.environ["SQLJOBS_TEST_SPANS"])))
trace.set_tracer_provider(provider)

app = App()


class Nothing(BaseModel):
    pass


@app.job(name="traced.cli", queue=QUEUE)
async def traced(ctx: JobContext, payload: Nothing) -> str:
    await ctx.step.run_async("only", lambda: "done")
    return "ok"
