"""Webhooks both ways: send a signed "order.paid" event to a partner for each paid order,
and receive a partner's signed events as jobs.

    export SQLJOBS_DSN=postgresql://...  PARTNER_URL=http://127.0.0.1:8000/hooks/orders
    uvicorn examples.webhooks.app:web --port 8000      # the receiving side
    sqljobs worker examples.webhooks.app:app            # runs both kinds of job
    python -m examples.webhooks.app                     # sends one event

Here the partner is this same web app, so the event goes round once: the worker POSTs it,
the receiver verifies it and enqueues "orders.received", the worker runs that.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN

# A Standard Webhooks secret is "whsec_" + base64 of 24 to 64 random bytes; keep it in
# your secret store. Two secrets while rotating: both sign, either verifies.
SECRET = os.environ.get("PARTNER_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
PARTNER_URL = os.environ.get("PARTNER_URL", "http://127.0.0.1:8000/hooks/orders")


class Paid(BaseModel):
    order_id: int
    amount_cents: int
    email: Annotated[str, sqljobs.Sensitive]  # "[redacted]" in every view of the job


# Outbound: one job per event; a 5xx, 408, 429 or no answer is retried by the policy,
# another 4xx fails the job at once. Every attempt is in jobs.webhook_attempts(job id).
order_paid = app.webhook(
    "partner.order-paid", url=PARTNER_URL, secrets=SECRET, data=Paid,
    retry=sqljobs.RetryPolicy(max_attempts=8, base_s=2, cap_s=600))


# Inbound: verified before anything parses it, one job per event id (a redelivery is
# the same job), 200 only once that job is written.
@app.webhook_receiver("orders.received", secrets=SECRET, max_bytes=64 << 10)
def received(ctx: sqljobs.JobContext, event: sqljobs.ReceivedEvent) -> dict[str, Any]:
    order = event.data["data"]
    ctx.logger.info("partner event %s: %s for order %s", event.id, event.type,
                    order["order_id"])
    return {"order_id": order["order_id"], "type": event.type}


web = Starlette(routes=[Mount("/hooks/orders", app=received)])


if __name__ == "__main__":
    with app:
        sent = order_paid.send("order.paid", Paid(order_id=7, amount_cents=4200,
                                                  email="ada@example.com"),
                               id="order-7-paid")
        print(f"job {sent.id} delivers event order-7-paid")
