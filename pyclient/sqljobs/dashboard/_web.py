"""The dashboard's ASGI application: routes, database access, and the action guard.

Every read runs on a connection opened with default_transaction_read_only = on, so a
page cannot write whatever it calls. Writes (the actions) use a second, ordinary
connection, only when actions are enabled and the request is authorised and carries the
CSRF token. Endpoints are plain functions: Starlette runs them in its thread pool, so
the blocking psycopg calls do not hold up the event loop.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from psycopg.conninfo import conninfo_to_dict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from sqljobs._client import introspection, queries
from sqljobs._client.connection import Client
from sqljobs._client.errors import InvalidArgument, SqljobsError, UnknownJob
from sqljobs._client.queries import Call
from sqljobs._client.records import BulkMoved
from sqljobs.dashboard import _charts as charts
from sqljobs.dashboard import _present as present
from sqljobs.dashboard._csrf import COOKIE, FIELD, CsrfTokens

PAGE_SIZE = 50
TOKEN_COOKIE = "sqljobs_token"
FILTER_FIELDS = ("state", "queue", "name", "tenant", "key", "created_after", "created_before")
BULK_FIELDS = {"state", "queue", "name", "tenant"}  # what the *_where verbs filter on
JOB_VERBS = {"retry": lambda i: queries.requeue([i]), "cancel": queries.cancel,
             "promote": queries.promote, "remove": queries.remove}
BULK_VERBS = {"retry": queries.requeue_where, "cancel": queries.cancel_where,
              "promote": queries.promote_where, "remove": queries.remove_where}
BULK_MAX = 1000
LIVE_HEADER = "x-sqljobs-live"  # the refresh script asks for a page's live part only
SUCCEEDED, FAILED = "#3a7d44", "#b23a48"


@dataclass(frozen=True)
class Range:
    """A time range the overview offers: its length, its bucket, how often to refresh."""

    key: str
    label: str
    minutes: int
    bucket_minutes: int
    refresh_s: int


RANGES = {r.key: r for r in (Range("15m", "15 min", 15, 1, 5), Range("1h", "1 h", 60, 1, 5),
                             Range("6h", "6 h", 360, 5, 15), Range("24h", "24 h", 1440, 15, 30))}
DEFAULT_RANGE = "1h"
REFRESH_S = 5  # the jobs list and a job's page
LATENCY_MINUTES = 60  # the overview's wait and run percentiles: over at most this
FINAL_STATES = ("succeeded", "failed", "dead", "cancelled")


def finished_by_queue(minutes: int, bucket_minutes: int) -> Call[list[dict[str, Any]]]:
    return Call("select bucket, queue, succeeded, failed, dead, cancelled "
                "from jobs.finished_by_queue(%s, %s)", (minutes, bucket_minutes),
                lambda rows: [dict(row) for row in rows])


def window_start(now: datetime, chosen: Range) -> datetime:
    """The first bucket of jobs.finished_by_queue's window, as the SQL computes it: the
    window ends with the bucket holding the current minute, buckets aligned on
    multiples of their length."""
    bucket_s = chosen.bucket_minutes * 60
    end_minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = -(-int(end_minute.timestamp()) // bucket_s) * bucket_s
    return datetime.fromtimestamp(end, UTC) - timedelta(minutes=chosen.minutes)


def _database_label(host: str | None, port: Any, dbname: str | None, user: str | None) -> str:
    """user@host:port/dbname: where the dashboard reads, never a password."""
    where = host or "localhost"
    if where.startswith("/"):
        where = f"socket {where}"
    return f"{user + '@' if user else ''}{where}:{port or 5432}/{dbname or '?'}"


async def _form(request: Request) -> dict[str, str]:
    """The posted url-encoded form (what the dashboard's forms send): parsed here rather
    than by Starlette, which would need python-multipart for it."""
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _trace_id(traceparent: str | None) -> str | None:
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 else None


class Dashboard:
    def __init__(self, dsn: str, allow_actions: bool, token: str | None) -> None:
        self.dsn = dsn
        self.token = token
        self.actions_enabled = allow_actions or token is not None
        self.csrf = CsrfTokens()
        self.templates = Environment(
            loader=FileSystemLoader(Path(__file__).with_name("templates")),
            autoescape=select_autoescape(["html"]))
        self.templates.filters["age"] = present.age
        self.templates.filters["rate"] = present.rate
        self.templates.filters["when"] = present.when
        self.templates.filters["actor"] = present.actor
        self.templates.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True,
                                                                default=str)
        self.templates.filters["compact"] = lambda v: json.dumps(v, sort_keys=True, default=str,
                                                                 ensure_ascii=False)
        self.templates.filters["error_message"] = present.error_message
        self.templates.globals["error_view"] = present.error_view
        self.templates.globals["ago"] = present.ago
        try:
            given = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
        except psycopg.ProgrammingError:
            given = {}
        # until a page connects and learns what the connection reached
        self.database = _database_label(given.get("host"), given.get("port"),
                                        given.get("dbname"), given.get("user"))

    # -- database ---------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Client]:
        with psycopg.connect(self.dsn, autocommit=True,
                             options="-c default_transaction_read_only=on") as conn:
            # what the connection really reached (defaults and environment applied)
            info = conn.info
            self.database = _database_label(info.host, info.port, info.dbname, info.user)
            yield Client(conn)

    @contextmanager
    def writing(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            yield conn

    # -- rendering ---------------------------------------------------------------------

    def authorised(self, request: Request) -> bool:
        if not self.actions_enabled:
            return False
        if self.token is None:
            return True
        presented = request.cookies.get(TOKEN_COOKIE) or ""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            presented = header[7:]
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def render(self, request: Request, template: str, status: int = 200,
               live_only: bool = False, **context: Any) -> HTMLResponse:
        """The page, or only its live part (the block `live`) when the refresh script
        asks for it (header x-sqljobs-live) or `live_only` is set."""
        csrf = request.cookies.get(COOKIE)
        fresh = not self.csrf.valid(csrf)
        if fresh:
            csrf = self.csrf.new()
        authorised = self.authorised(request)
        base = request.scope.get("root_path", "")
        query = request.url.query
        variables = dict(
            base=base, csrf=csrf, csrf_field=FIELD, actions=authorised,
            login=self.actions_enabled and not authorised,
            message=request.query_params.get("done"), database=self.database,
            mode=("actions enabled" if authorised else
                  "read-only: log in for actions" if self.actions_enabled else "read-only"),
            refreshed=datetime.now(UTC).strftime("%H:%M:%S UTC"),
            live_src=base + request.url.path.removeprefix(base) + (f"?{query}" if query else ""),
            refresh_s=REFRESH_S)
        variables.update(context)
        page = self.templates.get_template(template)
        variables["has_live"] = "live" in page.blocks
        if live_only or request.headers.get(LIVE_HEADER) == "1":
            if "live" not in page.blocks:
                return self.refuse(request, 404, "this page has no live part")
            body = "".join(page.blocks["live"](page.new_context(variables)))
        else:
            body = page.render(variables)
        response = HTMLResponse(body, status_code=status)
        # a page and its live part share a URL: never cached, one never served as the other
        response.headers["cache-control"] = "no-store"
        response.headers["vary"] = "x-sqljobs-live"
        if fresh:
            response.set_cookie(COOKIE, str(csrf), httponly=True, samesite="strict",
                                path=request.scope.get("root_path", "") or "/")
        return response

    def refuse(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "refused.html", status=status, refusal=message)

    async def guard(self, request: Request) -> tuple[dict[str, str], HTMLResponse | None]:
        """The posted form, or the refusal: actions off, not authorised, no CSRF token."""
        form = await _form(request)
        if not self.actions_enabled:
            return form, self.refuse(request, 403, "actions are disabled: this dashboard "
                                     "is read-only (start it with --allow-actions or --token)")
        if not self.authorised(request):
            return form, self.refuse(request, 403, "actions need the dashboard's token")
        if not self.csrf.check(request.cookies.get(COOKIE), form.get(FIELD)):
            return form, self.refuse(request, 403, "missing or wrong CSRF token: reload the "
                                     "page and try again")
        return form, None

    # -- pages ---------------------------------------------------------------------------

    def overview_context(self, range_key: str | None) -> dict[str, Any]:
        """Every queue's live counts (jobs.queue_gauges: the queues the metrics list);
        over the chosen range, the jobs finished per bucket, state and queue (one read,
        jobs.finished_by_queue: the charts and every count and rate); and each queue's
        wait and run percentiles over the last hour at most (jobs.stats, whose sort over
        a day of rows would cost more than the rest of the page)."""
        chosen = RANGES.get(range_key or "", RANGES[DEFAULT_RANGE])
        latency_minutes = min(chosen.minutes, LATENCY_MINUTES)
        with self.reading() as client:
            now = client.run(queries.database_now())
            gauges = client.run(queries.queue_gauges())
            rows = client.run(finished_by_queue(chosen.minutes, chosen.bucket_minutes))
            latencies = client.run(queries.stats(latency_minutes * 60.0))
        start = window_start(now, chosen)
        bucket = timedelta(minutes=chosen.bucket_minutes)
        n = chosen.minutes // chosen.bucket_minutes
        window_s = chosen.minutes * 60.0
        series: dict[str, tuple[list[int], list[int]]] = {}  # queue: succeeded, failed or dead
        finished: dict[str, dict[str, int]] = {}  # queue: counts by final state
        for row in rows:
            index = int((row["bucket"] - start) / bucket)
            ok, bad = series.setdefault(row["queue"], ([0] * n, [0] * n))
            ok[index] += row["succeeded"]
            bad[index] += row["failed"] + row["dead"]
            counts = finished.setdefault(row["queue"], dict.fromkeys(FINAL_STATES, 0))
            for final in FINAL_STATES:
                counts[final] += row[final]
        succeeded = [sum(q[0][i] for q in series.values()) for i in range(n)]
        failed = [sum(q[1][i] for q in series.values()) for i in range(n)]
        done, bad_total = sum(succeeded), sum(failed)
        queue_charts = [charts.bars(
            start, bucket, [charts.Series("succeeded", SUCCEEDED, ok),
                            charts.Series("failed or dead", FAILED, bad)],
            f"{queue}: {sum(ok)} succeeded ({present.rate(sum(ok) / window_s)}), "
            f"{sum(bad)} failed or dead ({present.rate(sum(bad) / window_s)})",
            height=150, chart_id=f"chart-queue-{queue}")
            for queue, (ok, bad) in sorted(series.items())]
        latency = {s.queue: s for s in latencies}
        by_queue = [{"queue": queue, **counts, **_outcomes(counts, window_s),
                     "latency": latency.get(queue)}
                    for queue, counts in sorted(finished.items())]
        return {
            "range": chosen, "ranges": list(RANGES.values()), "now": now,
            "gauges": gauges, "by_queue": by_queue,
            "outcomes": {q["queue"]: q for q in by_queue},
            "latency_label": "1 h" if latency_minutes == 60 else chosen.label,
            "totals": {"succeeded": done, "failed": bad_total,
                       "succeeded_rate": present.rate(done / window_s),
                       "failed_rate": present.rate(bad_total / window_s),
                       "running": sum(g.running for g in gauges),
                       "ready": sum(g.ready for g in gauges),
                       "dead": sum(g.dead for g in gauges)},
            "throughput": charts.bars(
                start, bucket, [charts.Series("succeeded", SUCCEEDED, succeeded)],
                f"Succeeded: {done} in the last {chosen.label} "
                f"({present.rate(done / window_s)}), peak {max(succeeded, default=0)} "
                f"per {chosen.bucket_minutes} min", chart_id="chart-throughput"),
            "failures": charts.bars(
                start, bucket, [charts.Series("failed or dead", FAILED, failed)],
                f"Failed or dead: {bad_total} in the last {chosen.label} "
                f"({present.rate(bad_total / window_s)}), peak {max(failed, default=0)} "
                f"per {chosen.bucket_minutes} min", chart_id="chart-failures"),
            "queue_charts": queue_charts,
            "failure_rate": (bad_total / (done + bad_total)) if done + bad_total else 0.0,
            "refresh_s": chosen.refresh_s}

    def overview(self, request: Request) -> Response:
        return self.render(request, "overview.html",
                           **self.overview_context(request.query_params.get("range")))

    def overview_fragment(self, request: Request) -> Response:
        return self.render(request, "overview.html", live_only=True,
                           **self.overview_context(request.query_params.get("range")))

    def filter_of(self, params: Mapping[str, str]) -> dict[str, Any]:
        return {f: params[f] for f in FILTER_FIELDS if params.get(f)}

    def jobs(self, request: Request, preset: Mapping[str, str] | None = None) -> Response:
        params = dict(request.query_params)
        params.update(preset or {})
        filter = self.filter_of(params)
        after = params.get("after")
        try:
            after_id = int(after) if after else None
            with self.reading() as client:
                page = client.run(introspection.list_jobs(filter, after_id, PAGE_SIZE + 1))
        except (InvalidArgument, ValueError) as error:
            return self.render(request, "jobs.html", status=400, jobs=[], filter=filter,
                               next_after=None, error=str(error), title="Jobs")
        more = len(page) > PAGE_SIZE
        page = page[:PAGE_SIZE]
        return self.render(request, "jobs.html", jobs=page, filter=filter, error=None,
                           bulk=bool(filter) and filter.keys() <= BULK_FIELDS,
                           next_after=page[-1].id if more else None,
                           title="Dead letters" if preset else "Jobs")

    def dead(self, request: Request) -> Response:
        return self.jobs(request, preset={"state": "dead"})

    def job(self, request: Request, status: int = 200, refusal: str | None = None) -> Response:
        job_id = int(request.path_params["job_id"])
        with self.reading() as client:
            now = client.run(queries.database_now())
            detail = client.run(introspection.job_detail(job_id))
            factory = None if detail is None else factory_of(client, detail["job"]["name"])
        if detail is None:
            return self.refuse(request, 404, f"no job has id {job_id}")
        job = detail["job"]
        attempts = introspection.attempts_of(detail)
        rows = [{"attempt": a, "outcome": present.outcome_label(a, job["max_attempts"]),
                 "error": present.error_view(a.error),
                 "took": present.age(a.duration_s) if a.ended_at else
                 ("running for " + present.ago(a.started_at, now).removesuffix(" ago")
                  if a.outcome == "running" else "-")} for a in attempts]
        label = present.state_label(job, attempts, detail["steps"], detail["waits"],
                                    detail["children"], now)
        return self.render(request, "job.html", status=status, detail=detail, job=job,
                           attempts=rows, label=label, now=now,
                           last_error=present.error_view(job.get("last_error")),
                           trace_id=_trace_id(job.get("traceparent")), refusal=refusal,
                           factory=factory)

    def workers(self, request: Request) -> Response:
        with self.reading() as client:
            live = client.run(queries.workers())
            unserved = client.run(queries.unserved_jobs())
        return self.render(request, "workers.html", workers=live, unserved=unserved)

    def schedules(self, request: Request) -> Response:
        with self.reading() as client:
            listed = client.run(queries.schedules())
        return self.render(request, "schedules.html", schedules=listed)

    def backfills(self, request: Request) -> Response:
        """The backfill ledger of every environment, with progress."""
        with self.reading() as client:
            rows = client.run(queries.backfills(None))
        return self.render(request, "backfills.html", backfills=rows)

    def factories(self, request: Request) -> Response:
        """The job types a data factory declared (as the workers registered them)."""
        with self.reading() as client:
            types = [t for t in client.run(introspection.job_types()) if t.factory]
        return self.render(request, "factories.html", factories=[
            {"name": t.name, "queue": t.queue, "kind": t.factory["kind"],
             "settings": json.dumps({k: v for k, v in t.factory.items() if k != "kind"}),
             "updated_at": t.updated_at} for t in types if t.factory is not None])

    def outbox(self, request: Request) -> Response:
        with self.reading() as client:
            stats = client.run(queries.outbox_stats())
        return self.render(request, "outbox.html", outbox=stats)

    # -- actions ---------------------------------------------------------------------------

    async def job_action(self, request: Request) -> Response:
        form, refused = await self.guard(request)
        if refused:
            return refused
        verb = request.path_params["verb"]
        job_id = int(request.path_params["job_id"])
        if verb == "fork":
            return self.fork(request, job_id, str(form.get("step") or ""))
        if verb not in JOB_VERBS:
            return self.refuse(request, 404, f"unknown action {verb!r}")
        try:
            with self.writing() as conn:
                Client(conn).run(JOB_VERBS[verb](job_id))
        except UnknownJob as error:
            return self.refuse(request, 404, str(error))
        except SqljobsError as error:
            if verb == "remove":
                return self.refuse(request, 409, str(error))
            return self.job(request, status=409, refusal=str(error))
        target = f"/jobs/{job_id}" if verb != "remove" else "/jobs"
        return RedirectResponse(f"{request.scope.get('root_path', '')}{target}?done={verb}",
                                status_code=303)

    def fork(self, request: Request, job_id: int, step: str) -> Response:
        """A new job from one of this job's steps (jobs.fork); its page next."""
        try:
            with self.writing() as conn:
                new_id = Client(conn).run(queries.fork(job_id, step))
        except UnknownJob as error:
            return self.refuse(request, 404, str(error))
        except SqljobsError as error:
            return self.job(request, status=409, refusal=str(error))
        return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs/{new_id}?done=fork",
                                status_code=303)

    async def bulk_action(self, request: Request) -> Response:
        form, refused = await self.guard(request)
        if refused:
            return refused
        verb = request.path_params["verb"]
        if verb not in BULK_VERBS:
            return self.refuse(request, 404, f"unknown action {verb!r}")
        filter = self.filter_of(form)
        if not filter:
            return self.refuse(request, 400, f"a bulk {verb} needs a filter")
        bulk = BULK_VERBS[verb]
        try:
            if form.get("confirm") != "yes":
                # the verb's own count: one call moving at most one job, rolled back
                with psycopg.connect(self.dsn) as conn:
                    step = Client(conn).run(bulk(filter, 1))
                    conn.rollback()
                return self.render(request, "confirm.html", verb=verb, filter=filter,
                                   matched=step.moved + step.remaining)
            moved = 0
            with self.writing() as conn:
                while True:
                    result: BulkMoved = Client(conn).run(bulk(filter, BULK_MAX))
                    moved += result.moved
                    if result.remaining == 0 or result.moved == 0:
                        break
        except SqljobsError as error:
            return self.refuse(request, 400, str(error))
        query = urlencode({**filter, "done": f"{verb} {moved} job(s)"})
        return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs?{query}",
                                status_code=303)

    async def queue_action(self, request: Request) -> Response:
        _, refused = await self.guard(request)
        if refused:
            return refused
        verb, queue = request.path_params["verb"], request.path_params["queue"]
        call = {"pause": queries.pause_queue, "resume": queries.resume_queue}.get(verb)
        if call is None:
            return self.refuse(request, 404, f"unknown action {verb!r}")
        try:
            with self.writing() as conn:
                Client(conn).run(call(queue))
        except SqljobsError as error:
            return self.refuse(request, 400, str(error))
        return RedirectResponse(f"{request.scope.get('root_path', '')}/?done={verb}+{queue}",
                                status_code=303)

    async def schedule_action(self, request: Request) -> Response:
        _, refused = await self.guard(request)
        if refused:
            return refused
        verb, name = request.path_params["verb"], request.path_params["name"]
        call = {"pause": queries.schedule_pause, "resume": queries.schedule_resume}.get(verb)
        if call is None:
            return self.refuse(request, 404, f"unknown action {verb!r}")
        try:
            with self.writing() as conn:
                Client(conn).run(call(name))
        except SqljobsError as error:
            return self.refuse(request, 400, str(error))
        return RedirectResponse(
            f"{request.scope.get('root_path', '')}/schedules?done={verb}+{name}", status_code=303)

    async def backfill_action(self, request: Request) -> Response:
        form, refused = await self.guard(request)
        if refused:
            return refused
        verb = request.path_params["verb"]
        environment, name = request.path_params["environment"], request.path_params["name"]
        call = {"pause": queries.backfill_pause, "resume": queries.backfill_resume,
                "cancel": queries.backfill_cancel}.get(verb)
        if call is None:
            return self.refuse(request, 404, f"unknown action {verb!r}")
        try:
            with self.writing() as conn:
                Client(conn).run(call(name, form.get("scope", ""), environment))
        except SqljobsError as error:
            return self.refuse(request, 400, str(error))
        return RedirectResponse(
            f"{request.scope.get('root_path', '')}/backfills?done={verb}+{name}", status_code=303)

    def login_page(self, request: Request) -> Response:
        return self.render(request, "login.html")

    async def login(self, request: Request) -> Response:
        form = await _form(request)
        given = form.get("token")
        if not self.csrf.check(request.cookies.get(COOKIE), form.get(FIELD)):
            return self.refuse(request, 403, "missing or wrong CSRF token")
        if self.token is None or not isinstance(given, str) or \
                not hmac.compare_digest(given.encode(), self.token.encode()):
            return self.refuse(request, 403, "wrong token")
        response = RedirectResponse(f"{request.scope.get('root_path', '')}/", status_code=303)
        response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict",
                            path=request.scope.get("root_path", "") or "/")
        return response


def factory_of(client: Client, name: str) -> dict[str, Any] | None:
    """The data factory that declared job type `name` (its registry row), if one did; None
    too where the registry is not readable (a tenant-bound login: it is fleet-wide)."""
    try:
        types = client.run(introspection.job_types())
    except SqljobsError:
        return None
    return next((t.factory for t in types if t.name == name), None)


def _outcomes(counts: Mapping[str, int], window_s: float) -> dict[str, Any]:
    """A queue's outcomes over the range, with rates a person reads."""
    bad = counts["failed"] + counts["dead"]
    ended = counts["succeeded"] + bad
    return {"failures": bad,
            "throughput": present.rate(counts["succeeded"] / window_s),
            "failures_rate": present.rate(bad / window_s),
            "finished_rate": present.rate(sum(counts.values()) / window_s),
            "failure_rate": f"{100 * bad / ended:.1f}%" if ended else "-"}


def app(dsn: str, allow_actions: bool = False, token: str | None = None) -> Starlette:
    """The dashboard as an ASGI application; mount it under any path.

    Actions (retry, cancel, promote, remove, pause and resume) are off unless
    `allow_actions` is true or a `token` is given; with a token, a request must present
    it (the /login form sets it as a cookie, or an `Authorization: Bearer` header)."""
    d = Dashboard(dsn, allow_actions, token)
    return Starlette(routes=[
        Route("/", d.overview),
        Route("/live/overview", d.overview_fragment),
        Route("/jobs", d.jobs),
        Route("/jobs/{job_id:int}", d.job),
        Route("/jobs/{job_id:int}/{verb}", d.job_action, methods=["POST"]),
        Route("/bulk/{verb}", d.bulk_action, methods=["POST"]),
        Route("/dead", d.dead),
        Route("/workers", d.workers),
        Route("/schedules", d.schedules),
        Route("/schedules/{name}/{verb}", d.schedule_action, methods=["POST"]),
        Route("/outbox", d.outbox),
        Route("/backfills", d.backfills),
        Route("/factories", d.factories),
        Route("/backfills/{environment}/{name}/{verb}", d.backfill_action, methods=["POST"]),
        Route("/queues/{queue}/{verb}", d.queue_action, methods=["POST"]),
        Route("/login", d.login_page),
        Route("/login", d.login, methods=["POST"]),
    ])
