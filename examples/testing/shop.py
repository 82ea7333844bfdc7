"""A small shop's jobs: what examples/testing/test_shop.py tests with sqljobs.testing.

The App has no DSN of its own: it reads $SQLJOBS_DSN, which the `sqljobs_db` fixture
points at each test's database.
"""

from __future__ import annotations

from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy

app = App()
# What the fake payment provider holds: the tests look at it (a real app calls an API).
charges: dict[str, int] = {}


class Order(BaseModel):
    order_id: str
    email: str
    amount: int


class Mail(BaseModel):
    to: str
    subject: str


def place_order(order: Order) -> None:
    """What a web view calls: the order's job, keyed by the order so a retry of the
    request never charges twice."""
    checkout.enqueue(order, key=f"checkout:{order.order_id}")


@app.job(name="shop.send_mail", queue="mail", retry=RetryPolicy(max_attempts=3, base_s=60.0))
def send_mail(ctx: JobContext, mail: Mail) -> dict[str, str]:
    if mail.to.endswith("@bounce.example"):
        raise ConnectionError(f"the mail server refused {mail.to}")
    return {"sent_to": mail.to}


def _charge(order: Order) -> dict[str, str]:
    charges[order.order_id] = order.amount
    return {"charge": f"ch_{order.order_id}"}


def _refund(charge: dict[str, str]) -> None:
    charges.pop(charge["charge"].removeprefix("ch_"), None)


@app.job(name="shop.checkout", queue="orders", retry=RetryPolicy(max_attempts=1))
async def checkout(ctx: JobContext, order: Order) -> str:
    """A saga: charge, then ship; a shipment that fails for good refunds the charge."""
    await ctx.step.run_async("charge", lambda: _charge(order), compensate=_refund)
    if order.amount > 1000:
        raise RuntimeError("no carrier takes parcels this heavy")
    await ctx.step.invoke_async("receipt", send_mail,
                                Mail(to=order.email, subject=f"order {order.order_id}"))
    return "shipped"


@app.task(cron="0 8 * * *", name="shop.daily_digest", queue="mail")
def daily_digest(ctx: JobContext) -> None:
    send_mail.enqueue(Mail(to="team@shop.example", subject="digest"),
                      key=f"digest:{ctx.key}")
