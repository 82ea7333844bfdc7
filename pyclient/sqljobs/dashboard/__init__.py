"""The operators' web dashboard (the `dashboard` extra): `sqljobs dashboard`, or mount
`sqljobs.dashboard.app(dsn=...)` in a Starlette or FastAPI application.

Pages read the redacting SQL (jobs.list_jobs, jobs.job_detail, jobs.queue_gauges ...);
actions, off unless asked for, call the same SQL verbs as `sqljobs jobs ...`.
See docs/howto-dashboard.md.
"""

from sqljobs.dashboard._web import app

__all__ = ["app"]
