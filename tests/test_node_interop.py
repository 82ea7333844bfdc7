"""A Node.js consumer and a Python one on the same database, each running the other's jobs.

examples/node/ (node-postgres, plain SQL) runs as real processes: its worker registers,
claims in batches, heartbeats, acks with results, nacks (a retry, a terminal failure),
emits events and stops on SIGTERM; its producer enqueues jobs that a Python worker runs
and reads their results. Python enqueues jobs the Node worker runs and reads theirs.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, JobFailed, fresh_key
from sqljobs._client import queries
from sqljobs._client.records import JobSpec
from sqljobs._runtime.context import JobContext
from tests.node import install, needs_node, pg_env
from tests.worker_helpers import running

NODE_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "node"
FILES = ["package.json", "sqljobs.mjs", "worker.mjs", "call.mjs"]
NODE_WORKER_ID = "node-interop-1"

pytestmark = needs_node


class Factors(BaseModel):
    a: int
    b: int


def python_app(dsn: str) -> App:
    app = App(dsn)

    @app.job(name="py.multiply", queue="py")
    async def multiply(ctx: JobContext, payload: Factors) -> dict[str, Any]:
        return {"product": payload.a * payload.b, "by": "python"}

    return app


@pytest.fixture(scope="module")
def node_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(NODE_EXAMPLE, FILES, tmp_path_factory.mktemp("node"))


@pytest.fixture
def node_worker(node_dir: Path, db_dsn: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(["node", "worker.mjs", NODE_WORKER_ID], cwd=node_dir,
                               env=pg_env(db_dsn), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def enqueue(app: App, name: str, payload: dict[str, Any], **spec: Any) -> int:
    return app.client.run(queries.enqueue_spec(
        JobSpec(name=name, key=fresh_key(), payload=payload, queue="node", **spec))).id


def test_python_enqueues_for_a_node_worker_and_reads_its_results(
        db_dsn: str, conn: psycopg.Connection[Any],
        node_worker: subprocess.Popen[str]) -> None:
    app = python_app(db_dsn)
    try:
        sums = [enqueue(app, "node.add", {"a": n, "b": 10}) for n in range(8)]
        flaky = enqueue(app, "node.flaky", {"n": 1}, retry_base_s=0.05)
        refused = enqueue(app, "node.add", {"a": "x", "b": 1})

        assert [app.result(i, timeout=60) for i in sums] == [
            {"sum": n + 10, "by": "node", "attempt": 1} for n in range(8)]
        assert app.result(flaky, timeout=60) == {"n": 1, "attempts": 2}
        with pytest.raises(JobFailed) as failed:
            app.result(refused, timeout=60)
        assert failed.value.kind == "terminal"

        # registered: the Node worker is listed with its names, its queue is served
        workers = conn.execute("select id, queues, names from jobs.workers()").fetchall()
        assert (NODE_WORKER_ID, ["node"], ["node.add", "node.flaky"]) in workers
        assert conn.execute("select count(*) from jobs.unserved_jobs() where queue = 'node'"
                            ).fetchone() == (0,)
        # its events
        events = conn.execute("select payload from jobs.event where name = 'node.added' "
                              "order by id").fetchall()
        assert sorted(e[0]["sum"] for e in events) == [n + 10 for n in range(8)]
        # the flaky job's first attempt left its error, marked historical by the ack
        error = conn.execute("select last_error from jobs.job where id = %s",
                             (flaky,)).fetchone()
        assert error is not None and error[0]["kind"] == "error"
        assert error[0]["historical"] is True and error[0]["attempt"] == 1

        node_worker.send_signal(signal.SIGTERM)
        out, err = node_worker.communicate(timeout=30)
        assert node_worker.returncode == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary == {"stopped": NODE_WORKER_ID,
                           "counts": {"succeeded": 9, "failed": 1, "retried": 1, "lost": 0}}
        assert conn.execute("select count(*) from jobs.workers() where id = %s",
                            (NODE_WORKER_ID,)).fetchone() == (0,)
    finally:
        app.close()


def test_node_enqueues_for_a_python_worker_and_reads_its_results(
        db_dsn: str, conn: psycopg.Connection[Any], node_dir: Path) -> None:
    app = python_app(db_dsn)
    try:
        with running(app, queues=["py"]):
            call = subprocess.run(
                ["node", "call.mjs", "py.multiply", "py",
                 "k1", '{"a": 6, "b": 7}', "k2", '{"a": 3, "b": 5}', "k3", '{"a": "x", "b": 1}'],
                cwd=node_dir, env=pg_env(db_dsn), capture_output=True, text=True, timeout=90,
                check=False)
        assert call.returncode == 0, call.stderr
        lines = [json.loads(line) for line in call.stdout.splitlines()]
        assert [(x["key"], x["outcome"], x["state"], x["result"]) for x in lines] == [
            ("k1", "created", "succeeded", {"product": 42, "by": "python"}),
            ("k2", "created", "succeeded", {"product": 15, "by": "python"}),
            ("k3", "created", "failed", None)]
        assert lines[2]["last_error"]["kind"] == "invalid_payload"
        # ids come back from node-postgres as strings (bigint), and name the jobs
        for line in lines:
            row = conn.execute("select key from jobs.job where id = %s",
                               (int(line["id"]),)).fetchone()
            assert row == (line["key"],)
    finally:
        app.close()
