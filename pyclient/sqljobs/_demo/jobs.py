"""The demo's example jobs, declared on an App of their own (`build_app`).

Every job is named `demo.*` and runs on a `demo-*` queue, so the demo can share a
database with real work without touching it. Each handler narrates what it does through
the `say` callback the runner gives; narration sits inside step functions (which run
once) rather than in handler bodies (which run again on every replay).

    demo.send_welcome     an email: the flaky one fails its first attempt, then succeeds
    demo.sync_crm         always fails: 3 attempts with a tiny backoff, then dead-lettered
    demo.fulfil_order     a saga: reserve, charge, sleep 2 s, wait for the payment event,
                          ship; shipping to Atlantis fails for good, so the charge is
                          refunded and the stock released (compensations, in reverse)
    demo.heartbeat        a cron task firing every 2 seconds (6-field cron, seconds first)
    demo.make_thumbnails  fans out one demo.resize child job per width (invoke_many)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from sqljobs._app import App
from sqljobs._declare.jobs import JobHandle, RetryPolicy
from sqljobs._runtime.context import JobContext

Say = Callable[[str], None]

PAYMENT_EVENT = "demo.payment.confirmed"
SLEEP_S = 2.0
HEARTBEAT_CRON = "*/2 * * * * *"
HEARTBEAT = "demo.heartbeat"
WIDTHS = (64, 256, 1024)


class SmtpBusy(Exception):
    """The mail server asked us to come back later (a retryable error)."""


class CrmUnreachable(Exception):
    """The CRM never answers: this job ends dead-lettered."""


class CarrierRefused(Exception):
    """The carrier will not ship there: a terminal error, so the saga unwinds."""


class Welcome(BaseModel):
    to: str
    flaky: bool = False


class Contact(BaseModel):
    email: str


class Order(BaseModel):
    id: str
    amount_cents: int
    ship_to: str


class Image(BaseModel):
    image: str


class Resize(BaseModel):
    image: str
    width: int


@dataclass(frozen=True)
class DemoJobs:
    """The demo's App and the handles the runner enqueues."""

    app: App
    send_welcome: JobHandle[Any]
    sync_crm: JobHandle[Any]
    fulfil_order: JobHandle[Any]
    make_thumbnails: JobHandle[Any]
    resize: JobHandle[Any]


def _euros(cents: int) -> str:
    return f"{cents / 100:.2f} EUR"


def build_app(dsn: str, say: Say) -> DemoJobs:
    """An App on `dsn` declaring the demo's jobs; handlers narrate through `say`."""
    app = App(dsn)

    @app.job(name="demo.send_welcome", queue="demo-mail",
             retry=RetryPolicy(max_attempts=3, base_s=0.5, cap_s=0.5, jitter="none"))
    async def send_welcome(ctx: JobContext, mail: Welcome) -> dict[str, Any]:
        if mail.flaky and ctx.attempt == 1:
            say(f"mail    job {ctx.job_id}: {mail.to}: the mail server answered 421 on "
                f"attempt 1; sqljobs retries it in 0.5 s")
            raise SmtpBusy("421 4.7.0 try again later")
        say(f"mail    job {ctx.job_id}: welcome mail sent to {mail.to} (attempt {ctx.attempt})")
        return {"sent_to": mail.to, "attempt": ctx.attempt}

    @app.job(name="demo.sync_crm", queue="demo-crm",
             retry=RetryPolicy(max_attempts=3, base_s=0.2, cap_s=0.4, jitter="none"))
    async def sync_crm(ctx: JobContext, contact: Contact) -> None:
        final = " (the last one: dead-lettered)" if ctx.is_final_attempt else ""
        say(f"crm     job {ctx.job_id}: attempt {ctx.attempt} of {ctx.max_attempts} "
            f"failed{final}")
        raise CrmUnreachable(f"crm.example.com refused the connection for {contact.email}")

    @app.job(name="demo.fulfil_order", queue="demo-orders", terminal=(CarrierRefused,),
             retry=RetryPolicy(max_attempts=3, base_s=0.5, cap_s=1.0, jitter="none"))
    async def fulfil_order(ctx: JobContext, order: Order) -> dict[str, Any]:
        job = ctx.job_id

        def reserve() -> dict[str, Any]:
            say(f"orders  job {job}: order {order.id}: stock reserved")
            return {"reservation": f"R-{job}"}

        def release(stock: dict[str, Any]) -> dict[str, Any]:
            say(f"orders  job {job}: order {order.id}: COMPENSATION: stock reservation "
                f"{stock['reservation']} released")
            return {"released": stock["reservation"]}

        def charge() -> dict[str, Any]:
            say(f"orders  job {job}: order {order.id}: card charged {_euros(order.amount_cents)}; "
                f"sleeping {SLEEP_S:.0f} s (the job parks, its worker slot is free)")
            return {"charge": f"CH-{job}", "amount_cents": order.amount_cents}

        def refund(paid: dict[str, Any]) -> dict[str, Any]:
            say(f"orders  job {job}: order {order.id}: COMPENSATION: "
                f"{_euros(paid['amount_cents'])} refunded ({paid['charge']})")
            return {"refunded": paid["charge"]}

        await ctx.step.run_async("reserve-stock", reserve, compensate=release)
        await ctx.step.run_async("charge-card", charge, compensate=refund)
        await ctx.step.sleep_async("cool-off", SLEEP_S)
        payment = await ctx.step.wait_for_event_async("payment", event=PAYMENT_EVENT,
                                                match={"order": order.id}, timeout=120)
        if payment is None:
            raise CarrierRefused(f"order {order.id}: no payment confirmation in time")

        def ship() -> dict[str, Any]:
            if order.ship_to == "Atlantis":
                say(f"orders  job {job}: order {order.id}: the carrier refuses to ship to "
                    f"{order.ship_to} (terminal): the saga unwinds")
                raise CarrierRefused(f"no carrier ships to {order.ship_to}")
            say(f"orders  job {job}: order {order.id}: payment confirmed, shipped to "
                f"{order.ship_to}")
            return {"tracking": f"TRK-{job}"}

        shipment = await ctx.step.run_async("ship", ship)
        return {"order": order.id, **shipment}

    @app.task(cron=HEARTBEAT_CRON, name=HEARTBEAT, queue="demo-cron", catch_up="none")
    async def heartbeat(ctx: JobContext) -> dict[str, Any]:
        say(f"cron    job {ctx.job_id}: heartbeat (cron {HEARTBEAT_CRON}, key {ctx.key})")
        return {"key": ctx.key}

    @app.job(name="demo.resize", queue="demo-media")
    async def resize(ctx: JobContext, image: Resize) -> dict[str, Any]:
        say(f"media   job {ctx.job_id}: child: {image.image} resized to {image.width} px")
        return {"width": image.width, "bytes": image.width * image.width // 8}

    @app.job(name="demo.make_thumbnails", queue="demo-media")
    async def make_thumbnails(ctx: JobContext, image: Image) -> dict[str, Any]:
        sizes = await ctx.step.invoke_many_async(
            "resize", resize, [{"image": image.image, "width": w} for w in WIDTHS])
        say(f"media   job {ctx.job_id}: all {len(sizes)} child jobs succeeded: thumbnails done")
        return {"image": image.image, "thumbnails": sizes}

    return DemoJobs(app=app, send_welcome=send_welcome, sync_crm=sync_crm,
                    fulfil_order=fulfil_order, make_thumbnails=make_thumbnails, resize=resize)


__all__ = ["HEARTBEAT", "HEARTBEAT_CRON", "PAYMENT_EVENT", "SLEEP_S", "WIDTHS", "DemoJobs",
           "build_app"]
