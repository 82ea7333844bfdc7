"""Webhook throughput: outbound deliveries per second to a local endpoint, and the
receiver's accepted requests per second.

    python -m bench.webhooks [--events 2000] [--concurrency 32] [--requests 2000]

Outbound: `--events` events enqueued first, then one worker in this process
(`--concurrency` slots) delivers them to a local endpoint (uvicorn in a subprocess,
answering 200); the clock runs from the worker's start until every job succeeded.
Receiver: `app.webhook_receiver` served by uvicorn in a subprocess; this process sends
`--requests` signed events, `--clients` at a time, and counts the 200s (each one a
written job). Prints Markdown. Everything runs on one machine: the numbers are what it
has to share between PostgreSQL, the worker, the server and the load.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
from standardwebhooks import Webhook

from bench.db import admin_dsn_from_env, drop_database, fresh_database
from sqljobs import App, Worker
from sqljobs._schema import migrate

SECRET = "whsec_" + base64.b64encode(b"bench-signing-key-of-32-bytes!!!").decode()
DB = "sqljobs_bench_webhooks"


async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The outbound test's partner: reads the body, answers 200."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def receiver_app() -> Any:
    """The receiving side, for uvicorn --factory (its DSN from $BENCH_DSN)."""
    app = App(os.environ["BENCH_DSN"], max_size=20)
    return app.webhook_receiver("bench.received", secrets=SECRET)(lambda ctx, event: None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(target: str, port: int, *, factory: bool = False,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "uvicorn", target, "--port", str(port), "--log-level",
            "warning", "--no-access-log"] + (["--factory"] if factory else [])
    process = subprocess.Popen(args, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{target} did not start")


def outbound(dsn: str, events: int, concurrency: int) -> tuple[float, float]:
    port = free_port()
    server = serve("bench.webhooks:endpoint", port)
    try:
        app = App(dsn, max_size=concurrency + 2)
        hook = app.webhook("bench.out", url=f"http://127.0.0.1:{port}/in", secrets=SECRET)
        with app:
            items = [(hook.event("bench.tick", {"n": i}, id=f"evt_{i}"), f"evt_{i}")
                     for i in range(events)]
            hook.job.enqueue_many(items)
            worker = Worker(app, concurrency=concurrency, install_signals=False,
                            poll_interval=0.05)
            thread = threading.Thread(target=worker.run)
            began = time.monotonic()
            thread.start()
            with psycopg.connect(dsn, autocommit=True) as conn:
                while True:
                    row: Any = conn.execute(
                        "select count(*) filter (where state = 'succeeded'), "
                        "count(*) filter (where state in ('failed', 'dead')) from jobs.job "
                        "where name = 'bench.out'").fetchone()
                    if row[0] + row[1] >= events:
                        break
                    time.sleep(0.05)
            seconds = time.monotonic() - began
            worker.stop()
            thread.join()
        assert row[1] == 0, f"{row[1]} deliveries failed"
        return seconds, events / seconds
    finally:
        server.terminate()
        server.wait()


async def _send_all(base: str, requests: int, clients: int) -> tuple[int, float]:
    signer = Webhook(SECRET)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    accepted = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal accepted
        while not queue.empty():
            i = queue.get_nowait()
            body = b'{"type":"bench.tick","data":{"n":%d}}' % i
            now = datetime.now(UTC)
            headers = {"webhook-id": f"in_{i}", "webhook-timestamp": str(int(now.timestamp())),
                       "webhook-signature": signer.sign(f"in_{i}", now, body),
                       "content-type": "application/json"}
            answer = await http.post("/", content=body, headers=headers)
            accepted += answer.status_code == 200

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as http:
        began = time.monotonic()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return accepted, time.monotonic() - began


def inbound(dsn: str, requests: int, clients: int) -> tuple[int, float, float]:
    port = free_port()
    server = serve("bench.webhooks:receiver_app", port, factory=True,
                   env={"BENCH_DSN": dsn})
    try:
        accepted, seconds = asyncio.run(_send_all(f"http://127.0.0.1:{port}", requests,
                                                  clients))
    finally:
        server.terminate()
        server.wait()
    with psycopg.connect(dsn, autocommit=True) as conn:
        written: Any = conn.execute(
            "select count(*) from jobs.job where name = 'bench.received'").fetchone()
    assert accepted == requests == written[0], (accepted, requests, written)
    return accepted, seconds, accepted / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    admin = admin_dsn_from_env()
    dsn = fresh_database(admin, DB)
    try:
        migrate.upgrade(dsn)
        out_s, out_rate = outbound(dsn, args.events, args.concurrency)
        accepted, in_s, in_rate = inbound(dsn, args.requests, args.clients)
    finally:
        drop_database(admin, DB)
    print("| measure | count | seconds | per second |\n| --- | --- | --- | --- |")
    print(f"| outbound deliveries (worker concurrency {args.concurrency}) | {args.events:,} "
          f"| {out_s:.1f} | {out_rate:,.0f} |")
    print(f"| receiver requests accepted ({args.clients} clients) | {accepted:,} "
          f"| {in_s:.1f} | {in_rate:,.0f} |")


if __name__ == "__main__":
    main()
