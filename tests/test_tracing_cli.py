"""Tracing from the outside: `sqljobs worker --tracing` in a real process, and what a
process without the tracing extra (or not using it) loads and says."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from sqljobs import App, fresh_key
from tests.processes import REPO, scalar, spawner, wait_for

HIDE_OPENTELEMETRY = "import sys; sys.modules['opentelemetry'] = None; "


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_import_sqljobs_and_its_runtime_load_no_opentelemetry() -> None:
    out = python(
        "import sys, sqljobs, sqljobs._runtime.worker, sqljobs._runtime.steps, "
        "sqljobs._cli.roles\n"
        "from sqljobs import App\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry', "
        "'sqljobs.tracing')))\n"
        "print(loaded)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_tracing_without_the_extra_is_a_clear_error() -> None:
    imported = python(HIDE_OPENTELEMETRY + "import sqljobs.tracing")
    assert imported.returncode != 0
    assert "install the tracing extra, pip install 'sqljobs[tracing]'" in imported.stderr
    # The CLI says so before it loads the app or touches a database.
    cli = python(HIDE_OPENTELEMETRY + "from sqljobs._cli import main; "
                 "sys.argv = ['sqljobs', 'worker', 'no.such.module:app', '--tracing']; main()")
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "--tracing" in cli.stdout + cli.stderr
    assert "pip install 'sqljobs[tracing]'" in " ".join((cli.stdout + cli.stderr).split())


def test_worker_tracing_flag_traces_runs_to_the_global_provider(
        db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    given = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"
    app = App(db_dsn)
    try:
        job_id = scalar(conn, "select id from jobs.enqueue('traced.cli', %s, '{}', %s)",
                        (fresh_key(), json.dumps({"queue": "traced-cli",
                                                  "traceparent": given})))
        with spawner(db_dsn, tmp_path, "worker", "tests.tracing_example_app:app",
                     "--queue", "traced-cli", "--tracing") as start:
            worker = start(env={"SQLJOBS_TEST_SPANS": str(spans_file)})
            wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                                    (job_id,)) == "succeeded", what="the job succeeded")
            wait_for(lambda: spans_file.exists() and '"CONSUMER"' in spans_file.read_text(),
                     what="the run's span exported")
            worker.proc.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, worker.output()
            assert "no TracerProvider" not in worker.output()
    finally:
        app.close()
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    (run,) = [s for s in spans if s["kind"] == "CONSUMER"]
    (step,) = [s for s in spans if s["name"] == "step only"]
    assert run["name"] == "process traced-cli"
    assert run["trace_id"] == "5bf92f3577b34da6a3ce929d0e0e4736"
    assert run["parent_id"] == "10f067aa0ba902b7"
    assert run["attributes"]["sqljobs.job.id"] == job_id
    assert run["attributes"]["sqljobs.run.outcome"] == "succeeded"
    assert (step["trace_id"], step["parent_id"]) == (run["trace_id"], run["span_id"])
