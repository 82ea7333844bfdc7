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
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from sqljobs.client import introspection, queries
from sqljobs.client.connection import Client
from sqljobs.client.errors import InvalidArgument, SqljobsError, UnknownJob
from sqljobs.client.queries import Call
from sqljobs.client.records import BulkMoved
from sqljobs.dashboard import charts
from sqljobs.dashboard.csrf import COOKIE, FIELD, CsrfTokens

PAGE_SIZE = 50
TOKEN_COOKIE = "sqljobs_token"
FILTER_FIELDS = ("state", "queue", "name", "tenant", "key", "created_after", "created_before")
BULK_FIELDS = {"state", "queue", "name", "tenant"}  # what the *_where verbs filter on
JOB_VERBS = {"retry": lambda i: queries.requeue([i]), "cancel": queries.cancel,
             "promote": queries.promote, "remove": queries.remove}
BULK_VERBS = {"retry": queries.requeue_where, "cancel": queries.cancel_where,
              "promote": queries.promote_where, "remove": queries.remove_where}
BULK_MAX = 1000


def finished_per_minute(minutes: int) -> Call[list[dict[str, Any]]]:
    return Call("select minute, succeeded, failed from jobs.finished_per_minute(%s)",
                (minutes,), lambda rows: [dict(row) for row in rows])


async def _form(request: Request) -> dict[str, str]:
    """The posted url-encoded form (what the dashboard's forms send): parsed here rather
    than by Starlette, which would need python-multipart for it."""
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _age(seconds: float | None) -> str:
    if not seconds:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _trace_id(traceparent: str | None) -> str | None:
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 else None


def _seconds_between(start: str | None, end: str | None) -> str:
    if not start or not end:
        return "-"
    return _age((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())


class Dashboard:
    def __init__(self, dsn: str, allow_actions: bool, token: str | None) -> None:
        self.dsn = dsn
        self.token = token
        self.actions_enabled = allow_actions or token is not None
        self.csrf = CsrfTokens()
        self.templates = Environment(
            loader=FileSystemLoader(Path(__file__).with_name("templates")),
            autoescape=select_autoescape(["html"]))
        self.templates.filters["age"] = _age
        self.templates.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True)

    # -- database ---------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Client]:
        with psycopg.connect(self.dsn, autocommit=True,
                             options="-c default_transaction_read_only=on") as conn:
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
               **context: Any) -> HTMLResponse:
        csrf = request.cookies.get(COOKIE)
        fresh = not self.csrf.valid(csrf)
        if fresh:
            csrf = self.csrf.new()
        body = self.templates.get_template(template).render(
            base=request.scope.get("root_path", ""), csrf=csrf, csrf_field=FIELD,
            actions=self.authorised(request), login=self.actions_enabled and
            not self.authorised(request), message=request.query_params.get("done"),
            **context)
        response = HTMLResponse(body, status_code=status)
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

    def overview_context(self) -> dict[str, Any]:
        with self.reading() as client:
            gauges = client.run(queries.queue_gauges())
            stats = client.run(queries.stats(3600.0))
            minutes = client.run(finished_per_minute(60))
        succeeded = [m["succeeded"] for m in minutes]
        failed = [m["failed"] for m in minutes]
        total = sum(succeeded) + sum(failed)
        return {"gauges": gauges, "stats": stats,
                "throughput": charts.bars(succeeded, "succeeded", "#3a7d44"),
                "failures": charts.bars(failed, "failed or dead", "#b23a48"),
                "failure_rate": (sum(failed) / total) if total else 0.0}

    def overview(self, request: Request) -> Response:
        return self.render(request, "overview.html", **self.overview_context())

    def overview_fragment(self, request: Request) -> Response:
        return self.render(request, "overview_live.html", **self.overview_context())

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
            detail = client.run(introspection.job_detail(job_id))
        if detail is None:
            return self.refuse(request, 404, f"no job has id {job_id}")
        job = detail["job"]
        return self.render(request, "job.html", status=status, detail=detail, job=job,
                           trace_id=_trace_id(job.get("traceparent")), refusal=refusal,
                           duration=_seconds_between(job.get("started_at"),
                                                     job.get("finished_at")))

    def workers(self, request: Request) -> Response:
        with self.reading() as client:
            live = client.run(queries.workers())
            unserved = client.run(queries.unserved_jobs())
        return self.render(request, "workers.html", workers=live, unserved=unserved)

    def schedules(self, request: Request) -> Response:
        with self.reading() as client:
            listed = client.run(queries.schedules())
        return self.render(request, "schedules.html", schedules=listed)

    def outbox(self, request: Request) -> Response:
        with self.reading() as client:
            stats = client.run(queries.outbox_stats())
        return self.render(request, "outbox.html", outbox=stats)

    # -- actions ---------------------------------------------------------------------------

    async def job_action(self, request: Request) -> Response:
        _, refused = await self.guard(request)
        if refused:
            return refused
        verb = request.path_params["verb"]
        job_id = int(request.path_params["job_id"])
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
        Route("/queues/{queue}/{verb}", d.queue_action, methods=["POST"]),
        Route("/login", d.login_page),
        Route("/login", d.login, methods=["POST"]),
    ])
