"""Prometheus metrics (sqljobs.metrics) and `sqljobs stats`, against the real database.

Metrics are scraped over HTTP on real sockets: from a worker running in this process,
from a `sqljobs worker --metrics-port` process, and from a `sqljobs metrics` process;
every value is checked against what the database holds. `import sqljobs` and a running
worker never load prometheus_client, and without it the commands say how to install it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel
from typer.testing import CliRunner

from sqljobs import App, JobContext, RetryPolicy, fresh_key
from sqljobs._cli import app as cli
from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs.metrics import QueueGaugeCollector, WorkerMetrics, serve
from tests.processes import CliProcess, scalar, spawner, wait_for
from tests.worker_example_app import QUEUE as EXAMPLE_QUEUE
from tests.worker_example_app import make_app as make_example_app
from tests.worker_helpers import running

QUEUE = "metered"
IDLE_QUEUE = "metered_idle"  # no worker serves it: its jobs stay ready
SECRET = "4111-1111-secret-card"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Card(BaseModel):
    card: str


def make_app(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="metered.ok", queue=QUEUE)
    async def ok(ctx: JobContext, payload: Card) -> int:
        return len(payload.card)

    @app.job(name="metered.sync_ok", queue=QUEUE)
    def sync_ok(ctx: JobContext, payload: Card) -> int:
        return len(payload.card)

    @app.job(name="metered.fails", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    async def fails(ctx: JobContext, payload: Card) -> None:
        raise ValueError("declined")

    @app.job(name="metered.idle", queue=IDLE_QUEUE)
    async def idle(ctx: JobContext, payload: Card) -> None:
        return None

    return app


def scrape(url: str) -> tuple[str, Samples]:
    """GET /metrics: the text, and every sample by (name, labels)."""
    body = httpx.get(url, timeout=10).text
    samples: Samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return body, samples


def value(samples: Samples, metric: str, /, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


def gauges_of(conn: psycopg.Connection[Any], queue: str) -> dict[str, float]:
    """The queue's gauges counted straight from jobs.job (not through jobs.queue_gauges)."""
    row = conn.execute(
        "select count(*) filter (where state in ('ready', 'interrupted') and run_at <= now()), "
        "count(*) filter (where state in ('ready', 'interrupted') and run_at > now()), "
        "count(*) filter (where state = 'running'), count(*) filter (where state = 'parked'), "
        "count(*) filter (where state = 'dead') from jobs.job where queue = %s",
        (queue,)).fetchone()
    assert row is not None
    names = ["ready", "scheduled", "running", "parked", "dead"]
    return {name: float(count) for name, count in zip(names, row, strict=True)}


def total(samples: Samples, metric: str) -> float:
    """The sum of a metric over all its label sets."""
    return sum(v for (name, _), v in samples.items() if name == metric)


def finished(conn: psycopg.Connection[Any], ids: list[int]) -> bool:
    return bool(scalar(conn, "select count(*) = %s from jobs.job where id = any(%s) "
                             "and finished_at is not null", (len(ids), ids)))


@pytest.fixture
def app(db_dsn: str, conn: psycopg.Connection[Any]) -> Iterator[App]:
    application = make_app(db_dsn)
    yield application
    application.close()


def test_a_worker_serves_its_runs_and_the_queue_gauges_as_the_database_has_them(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    names = ["metered.ok"] * 3 + ["metered.sync_ok"] * 2 + ["metered.fails"]
    ids = [app.job_handle(name).enqueue({"card": SECRET}, key=fresh_key()).id for name in names]
    for _ in range(4):
        app.job_handle("metered.idle").enqueue({"card": SECRET}, key=fresh_key())
    app.job_handle("metered.idle").enqueue({"card": SECRET}, key=fresh_key(), delay=3600)
    registry = CollectorRegistry()
    observer = WorkerMetrics(registry)
    gauges = QueueGaugeCollector(db_dsn, cache_s=0, registry=registry)
    server = serve(0, registry, "127.0.0.1")
    try:
        with running(app, queues=[QUEUE], observers=[observer]):
            wait_for(lambda: finished(conn, ids), "the six jobs to finish")
            # a run's duration is observed last, once its other metrics are in
            wait_for(lambda: total(scrape(server.url)[1],
                                   "sqljobs_job_run_duration_seconds_count") == 6,
                     "the six runs to be counted")
            body, samples = scrape(server.url)
    finally:
        server.close()
        gauges.close()

    # the run counters, by outcome, as the database settled them
    settled = conn.execute("select name, state::text, count(*) from jobs.job "
                           "where id = any(%s) group by 1, 2", (ids,)).fetchall()
    assert {(n, s, float(c)) for n, s, c in settled} == {
        ("metered.ok", "succeeded", 3.0), ("metered.sync_ok", "succeeded", 2.0),
        ("metered.fails", "dead", 1.0)}
    for name, state, count in settled:
        assert value(samples, "sqljobs_job_runs_total", queue=QUEUE, name=name,
                     outcome=state) == count
        assert value(samples, "sqljobs_job_run_duration_seconds_count", queue=QUEUE,
                     name=name) == count
        assert value(samples, "sqljobs_job_runs_in_progress", queue=QUEUE, name=name) == 0
        # enqueue-to-start, on the database clock: the sum is what the rows say
        waited = scalar(conn, "select sum(extract(epoch from first_started_at - created_at))"
                              "::float8 from jobs.job where id = any(%s) and name = %s",
                        (ids, name))
        assert value(samples, "sqljobs_job_start_latency_seconds_count", queue=QUEUE,
                     name=name) == count
        assert value(samples, "sqljobs_job_start_latency_seconds_sum", queue=QUEUE,
                     name=name) == pytest.approx(waited, abs=1e-6)
    assert value(samples, "sqljobs_worker_claimed_jobs_total") == 6
    claims = value(samples, "sqljobs_worker_claims_total")
    assert claims is not None and claims >= 1
    assert value(samples, "sqljobs_worker_claim_duration_seconds_count") == claims

    # the gauges, against the rows
    assert value(samples, "sqljobs_gauges_up") == 1
    for queue in (QUEUE, IDLE_QUEUE):
        for gauge, expected in gauges_of(conn, queue).items():
            assert value(samples, f"sqljobs_queue_{gauge}_jobs", queue=queue) == expected, \
                (queue, gauge)
    assert value(samples, "sqljobs_queue_ready_jobs", queue=IDLE_QUEUE) == 4
    assert value(samples, "sqljobs_queue_scheduled_jobs", queue=IDLE_QUEUE) == 1
    assert value(samples, "sqljobs_queue_demand_jobs", queue=IDLE_QUEUE) == 4
    assert value(samples, "sqljobs_queue_dead_jobs", queue=QUEUE) == 1
    age = value(samples, "sqljobs_queue_oldest_ready_age_seconds", queue=IDLE_QUEUE)
    assert age is not None and age > 0

    # label values are queues, job names, outcomes and limit names: never a payload value
    assert SECRET not in body
    labels = {key for (_, labelset) in samples for key, _ in labelset}
    assert labels <= {"queue", "name", "outcome", "limit", "le"}, labels


def test_the_gauges_read_the_database_once_per_cache_period(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app.job_handle("metered.idle").enqueue({"card": "a"}, key=fresh_key())
    registry = CollectorRegistry()
    gauges = QueueGaugeCollector(db_dsn, cache_s=3600, registry=registry)
    server = serve(0, registry, "127.0.0.1")
    try:
        assert gauges.reads == 0, "registering reads nothing"
        first = scrape(server.url)[1]
        app.job_handle("metered.idle").enqueue({"card": "b"}, key=fresh_key())
        second = scrape(server.url)[1]
        assert gauges.reads == 1
        assert value(first, "sqljobs_queue_ready_jobs", queue=IDLE_QUEUE) == 1
        assert value(second, "sqljobs_queue_ready_jobs", queue=IDLE_QUEUE) == 1  # cached
    finally:
        server.close()
        gauges.close()
    fresh = QueueGaugeCollector(db_dsn, cache_s=0)
    try:
        metrics = {m.name: m for m in fresh.collect()}
        assert [s.value for s in metrics["sqljobs_queue_ready_jobs"].samples] == [2]
    finally:
        fresh.close()


def test_a_lost_connection_answers_up_0_without_stale_gauges_then_reconnects(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    app.job_handle("metered.idle").enqueue({"card": "a"}, key=fresh_key())
    gauges = QueueGaugeCollector(db_dsn, cache_s=0)

    def read() -> tuple[float, list[float]]:
        metrics = {m.name: m for m in gauges.collect()}
        return (metrics["sqljobs_gauges_up"].samples[0].value,
                [s.value for s in metrics["sqljobs_queue_ready_jobs"].samples])

    try:
        assert read() == (1, [1])
        killed = scalar(conn, "select count(pg_terminate_backend(pid)) from pg_stat_activity "
                              "where application_name = 'sqljobs-metrics'")
        assert killed == 1
        assert read() == (0, []), "a failed read shows no gauges (the old ones would lie)"
        assert read() == (1, [1]), "the next scrape connects again"
    finally:
        gauges.close()
    nowhere = QueueGaugeCollector("postgresql://postgres@127.0.0.1:1/nowhere", cache_s=0)
    assert {m.name: m.samples[0].value for m in nowhere.collect()
            if m.name == "sqljobs_gauges_up"} == {"sqljobs_gauges_up": 0}


def test_a_declared_queue_whose_jobs_all_finished_reports_zeros_rather_than_vanishing(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The queues are the database's list (jobs.queue_gauges over jobs.declared_queues):
    a queue a worker declared stays, with zeros, once its jobs finished; a queue nobody
    declares leaves with its last job. Every collector, however long it ran, and the
    web dashboard report that same list."""
    conn.execute("select jobs.job_type_put('metered.idle', %s)",  # as a worker writes it
                 (json.dumps({"queue": IDLE_QUEUE}),))
    job_id = app.job_handle("metered.idle").enqueue({"card": "a"}, key=fresh_key()).id
    loose = Client(conn).run(queries.enqueue("loose.job", fresh_key(), {}, {"queue": "loose"}))
    gauges = QueueGaugeCollector(db_dsn, cache_s=0)

    def ready() -> list[tuple[str, float]]:
        metrics = {m.name: m for m in gauges.collect()}
        return [(s.labels["queue"], s.value) for s in metrics["sqljobs_queue_ready_jobs"].samples]

    try:
        assert ready() == [("loose", 1), (IDLE_QUEUE, 1)]
        conn.execute("select jobs.cancel(%s)", (job_id,))
        conn.execute("select jobs.cancel(%s)", (loose.id,))
        assert ready() == [(IDLE_QUEUE, 0)]
        fresh = QueueGaugeCollector(db_dsn, cache_s=0)
        try:
            metrics = {m.name: m for m in fresh.collect()}
            assert [s.labels["queue"] for s in metrics["sqljobs_queue_ready_jobs"].samples] == [
                IDLE_QUEUE], "a collector started later lists the same queues"
        finally:
            fresh.close()
    finally:
        gauges.close()


def test_limit_gauges_are_labelled_by_limit_name_only(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("select jobs.limit_put('metered_cards', '{\"scope\": \"key\", "
                 "\"target\": \"metered.idle\", \"key\": \"card\", \"concurrency\": 2}')")
    gauges = QueueGaugeCollector(db_dsn, cache_s=0)
    try:
        metrics = {m.name: m for m in gauges.collect()}
        concurrency = metrics["sqljobs_limit_concurrency"].samples
        assert [(s.labels, s.value) for s in concurrency] == [({"limit": "metered_cards"}, 2)]
        assert [s.value for s in metrics["sqljobs_limit_running_jobs"].samples] == [0]
    finally:
        gauges.close()
        conn.execute("select jobs.limit_remove('metered_cards')")


# -- real processes -------------------------------------------------------------------

SERVING = re.compile(r"serving (?:metrics|queue gauges) on http://[^:]+:(\d+)/metrics")


def served_port(process: CliProcess) -> int:
    def port() -> int | None:
        assert process.proc.poll() is None, process.output()
        found = SERVING.search(process.output())
        return int(found.group(1)) if found else None
    return int(wait_for(port, "the metrics server to start", timeout=30))


@pytest.mark.slow
def test_sqljobs_worker_metrics_port_serves_its_runs(
        db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    example = make_example_app(db_dsn)
    try:
        ids = [example.job_handle("example.echo").enqueue({"n": n}, key=fresh_key()).id
               for n in range(3)]
        ids.append(example.job_handle("example.terminal").enqueue({}, key=fresh_key()).id)
        example.job_handle("example.echo").enqueue({"n": 0}, key=fresh_key(),
                                                   queue="example_unserved")
    finally:
        example.close()
    with spawner(db_dsn, tmp_path, "worker", "tests.worker_example_app:app",
                 "--queue", EXAMPLE_QUEUE, "--metrics-port", "0") as start:
        worker = start(env={"EXAMPLE_FAST": "1"})
        port = served_port(worker)
        wait_for(lambda: finished(conn, ids), "the four jobs to finish")
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(lambda: total(scrape(url)[1], "sqljobs_job_run_duration_seconds_count") == 4,
                 "the four runs to be counted")
        _, samples = scrape(url)
        worker.proc.terminate()
        assert worker.wait(30) == 0, worker.output()
    assert value(samples, "sqljobs_job_runs_total", queue=EXAMPLE_QUEUE, name="example.echo",
                 outcome="succeeded") == scalar(
        conn, "select count(*) from jobs.job where id = any(%s) and state = 'succeeded'",
        (ids,))
    assert value(samples, "sqljobs_job_runs_total", queue=EXAMPLE_QUEUE,
                 name="example.terminal", outcome="failed") == 1
    assert value(samples, "sqljobs_gauges_up") == 1
    assert value(samples, "sqljobs_queue_ready_jobs", queue="example_unserved") == scalar(
        conn, "select count(*) from jobs.job where queue = 'example_unserved' "
              "and state = 'ready'") == 1
    assert ("process_cpu_seconds_total", frozenset()) in samples  # the global registry's


@pytest.mark.slow
def test_sqljobs_metrics_serves_the_fleet_gauges(
        app: App, db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    for _ in range(3):
        app.job_handle("metered.idle").enqueue({"card": SECRET}, key=fresh_key())
    for _ in range(2):
        app.job_handle("metered.ok").enqueue({"card": SECRET}, key=fresh_key(), delay=600)
    conn.execute("select jobs.claim('{metered_idle}', 'w-test', 1, 60)")
    conn.execute("select jobs.pause_queue('metered_paused')")
    with spawner(db_dsn, tmp_path, "metrics", "--port", "0", "--host", "127.0.0.1",
                 "--cache", "0") as start:
        server = start()
        url = f"http://127.0.0.1:{served_port(server)}/metrics"
        body, samples = scrape(url)
        for queue in (QUEUE, IDLE_QUEUE):
            for gauge, expected in gauges_of(conn, queue).items():
                assert value(samples, f"sqljobs_queue_{gauge}_jobs", queue=queue) == expected
        assert value(samples, "sqljobs_queue_running_jobs", queue=IDLE_QUEUE) == 1
        assert value(samples, "sqljobs_queue_demand_jobs", queue=IDLE_QUEUE) == 3
        assert value(samples, "sqljobs_queue_scheduled_jobs", queue=QUEUE) == 2
        assert value(samples, "sqljobs_queue_paused", queue="metered_paused") == 1
        assert value(samples, "sqljobs_queue_paused", queue=IDLE_QUEUE) == 0
        assert SECRET not in body
        assert not any(name.startswith("sqljobs_job_") for name, _ in samples), \
            "the fleet server has no worker's run metrics"
        # each scrape reads afresh (--cache 0)
        app.job_handle("metered.idle").enqueue({"card": SECRET}, key=fresh_key())
        assert value(scrape(url)[1], "sqljobs_queue_ready_jobs", queue=IDLE_QUEUE) == 3
        server.proc.terminate()
        assert server.wait(30) == 0, server.output()


# -- the extra stays apart ------------------------------------------------------------

def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])


def test_importing_sqljobs_and_running_a_worker_never_load_prometheus_client(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    job_id = app.job_handle("metered.ok").enqueue({"card": "x"}, key=fresh_key()).id
    code = f"""
import json, sys, threading
from pydantic import BaseModel
from sqljobs import App, JobContext, Worker

class Card(BaseModel):
    card: str

app = App({db_dsn!r})

@app.job(name="metered.ok", queue={QUEUE!r})
async def ok(ctx: JobContext, payload: Card) -> int:
    return len(payload.card)

worker = Worker(app, [{QUEUE!r}], install_signals=False, poll_interval=0.1)
thread = threading.Thread(target=worker.run)
thread.start()
print(app.result({job_id}, timeout=30), flush=True)
worker.stop()
thread.join(15)
print(json.dumps(sorted(m for m in sys.modules
                        if m.startswith(("prometheus_client", "sqljobs.metrics")))))
"""
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert scalar(conn, "select state::text from jobs.job where id = %s", (job_id,)) == \
        "succeeded"
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("command", [
    ["metrics", "--port", "0"],
    ["worker", "tests.worker_example_app:app", "--metrics-port", "0"],
])
def test_without_the_extra_the_commands_say_how_to_install_it(
        db_dsn: str, command: list[str]) -> None:
    code = ("import sys; sys.modules['prometheus_client'] = None\n"
            "from sqljobs._cli import main\n"
            f"sys.argv = ['sqljobs', *{command!r}, '--dsn', {db_dsn!r}]\n"
            "main()")
    out = run_python(code)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install 'sqljobs[metrics]'" in out.stdout + out.stderr


# -- sqljobs stats --------------------------------------------------------------------

def test_sqljobs_stats_prints_what_jobs_stats_answers(
        app: App, db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    ids = [app.job_handle(name).enqueue({"card": "x"}, key=fresh_key()).id
           for name in ["metered.ok"] * 4 + ["metered.fails"]]
    with running(app, queues=[QUEUE]):
        wait_for(lambda: finished(conn, ids), "the five jobs to finish")
    runner = CliRunner()
    result = runner.invoke(cli, ["stats", "--minutes", "60", "--json", "--dsn", db_dsn])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["window_s"] == 3600
    [row] = [q for q in answer["queues"] if q["queue"] == QUEUE]
    expected = conn.execute(
        "select succeeded, dead, wait_p50_s, run_p95_s from jobs.stats(3600) where queue = %s",
        (QUEUE,)).fetchone()
    assert (row["succeeded"], row["dead"], row["wait_p50_s"], row["run_p95_s"]) == expected
    assert (row["succeeded"], row["dead"], row["failed"], row["cancelled"]) == (4, 1, 0, 0)
    assert row["per_s"] == pytest.approx(5 / 3600)

    table = runner.invoke(cli, ["stats", "--dsn", db_dsn], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert QUEUE in table.output and "wait p95" in table.output

    refused = runner.invoke(cli, ["stats", "--minutes", "0", "--dsn", db_dsn],
                            env={"COLUMNS": "200"})
    assert refused.exit_code == 1
    assert "positive number of seconds" in refused.output


# -- the Grafana dashboard ------------------------------------------------------------

def test_the_grafana_dashboard_uses_only_metrics_that_exist() -> None:
    dashboard = json.loads((Path(__file__).resolve().parents[1] / "docs" / "grafana"
                            / "sqljobs.json").read_text())
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    gauges = QueueGaugeCollector("postgresql://unused")  # describe() reads nothing
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"],
                "gauge": [""]}
    exposed = {family.name + suffix
               for family in [*registry.collect(), *gauges.describe()]
               for suffix in suffixes[family.type]}
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\bsqljobs_\w+", target["expr"])}
    assert used, "the dashboard queries no sqljobs metric"
    assert used <= exposed, sorted(used - exposed)
    assert {"sqljobs_queue_demand_jobs", "sqljobs_job_runs_total",
            "sqljobs_job_start_latency_seconds_bucket"} <= used


def test_a_port_in_use_is_a_clear_error(db_dsn: str) -> None:
    server = serve(0, CollectorRegistry(), "127.0.0.1")
    try:
        result = CliRunner().invoke(cli, ["metrics", "--port", str(server.port), "--host",
                                          "127.0.0.1", "--dsn", db_dsn],
                                    env={"COLUMNS": "200"})
    finally:
        server.close()
    assert result.exit_code == 2, result.output
    assert f"cannot serve metrics on 127.0.0.1:{server.port}" in result.output
