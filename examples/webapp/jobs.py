"""The jobs of the example web app, and the worker that runs them.

    sqljobs worker examples.webapp.jobs:app

The App has no DSN of its own: the worker reads $SQLJOBS_DSN (or $DATABASE_URL), and
the web app enqueues through its SQLAlchemy session, so it never needs one.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy

app = App()
log = logging.getLogger(__name__)


class Welcome(BaseModel):
    signup_id: int
    email: str


@app.job(name="examples.send_welcome", queue="mail",
         retry=RetryPolicy(max_attempts=5, base_s=2.0))
def send_welcome(ctx: JobContext, payload: Welcome) -> dict[str, str | int]:
    """Pretend to send a welcome mail (a real one would call a mail API here)."""
    log.info("sending the welcome mail to %s (attempt %d)", payload.email, ctx.attempt)
    return {"sent_to": payload.email, "signup_id": payload.signup_id}
