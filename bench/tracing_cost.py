"""What tracing costs, off and on, in process (no database): `python -m bench.tracing_cost`.

docs/howto-tracing.md quotes it. Off: an enqueue's producer hook (none installed) and a
run's observer hooks with no observer. On: the same with sqljobs.tracing installed over
the OpenTelemetry SDK with no exporter (the spans are made and dropped), so the numbers
are the instrumentation's own cost, not an exporter's.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from datetime import UTC, datetime

from sqljobs._client.producing import producing
from sqljobs._client.records import ClaimedJob, JobSpec
from sqljobs._runtime.observing import Observers

SPECS = [JobSpec(name="bench.job", key="k", payload={"a": 1})]
JOB = ClaimedJob(
    id=1, name="bench.job", queue="bench", tenant=None, key="k", payload={}, priority=0,
    attempt=1, max_attempts=3, retry_base_s=1, retry_cap_s=2, retry_jitter="full", claim=1,
    lease_expires_at=datetime.now(UTC), timeout_s=None, progress=None,
    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    created_at=datetime.now(UTC))


def enqueue_hook() -> None:
    with producing("enqueue", SPECS) as sending:
        sending.enqueued([1])


def a_run(observers: Observers) -> Callable[[], None]:
    def run() -> None:
        watch = observers.run_begins(JOB)
        with watch.active():
            pass
        with watch.step("charge", "run"):
            pass
        watch.event("parked", {"step.name": "cool-off", "step.kind": "sleep"})
        watch.ended("succeeded", None, 0.1)
    return run


def per_call_us(fn: Callable[[], None], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from sqljobs.tracing import TracingObserver, instrument, uninstrument

    print(f"enqueue hook, off:           {per_call_us(enqueue_hook, 100_000):7.2f} us")
    print(f"run hooks, no observer:      {per_call_us(a_run(Observers()), 100_000):7.2f} us")
    provider = TracerProvider()
    instrument(tracer_provider=provider)
    try:
        print(f"enqueue hook, tracing on:    {per_call_us(enqueue_hook, 10_000):7.2f} us")
        on = a_run(Observers([TracingObserver(provider)]))
        print(f"run hooks, tracing on:       {per_call_us(on, 10_000):7.2f} us")
    finally:
        uninstrument()


if __name__ == "__main__":
    main()
