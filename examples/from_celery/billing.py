"""A Celery task ported to sqljobs (docs/coming-from-celery.md shows both side by side).

In Celery:

    @celery.task(bind=True, autoretry_for=(ConnectionError,), retry_backoff=True,
                 max_retries=5, acks_late=True)
    def send_invoice(self, invoice_id, email):
        pdf = render_pdf(invoice_id)
        mailer.send(email, pdf)
        return f"sent {invoice_id}"

    send_invoice.apply_async(args=[42, "ann@example.com"], countdown=60)
"""

from __future__ import annotations

from pydantic import BaseModel

from sqljobs import App, JobContext, RetryPolicy

app = App()
rendered: list[int] = []  # what the fake renderer and mailer did (the tests look)
mailbox: list[tuple[str, str]] = []
mail_server_down = [False]


class Invoice(BaseModel):
    invoice_id: int
    email: str


def render_pdf(invoice_id: int) -> str:
    rendered.append(invoice_id)
    return f"invoices/{invoice_id}.pdf"


def send_mail(to: str, attachment: str) -> None:
    if mail_server_down[0]:
        raise ConnectionError("the mail server is down")
    mailbox.append((to, attachment))


@app.job(queue="billing", retry=RetryPolicy(max_attempts=6, base_s=1.0, cap_s=300.0))
def send_invoice(ctx: JobContext, invoice: Invoice) -> str:
    # A step's result is stored before the call returns: a retry after the mail
    # failed does not render the PDF again.
    pdf = ctx.step.run("render", lambda: render_pdf(invoice.invoice_id))
    send_mail(invoice.email, pdf)
    return f"sent {invoice.invoice_id}"


def bill(invoice_id: int, email: str) -> int:
    """`apply_async(..., countdown=60)`: the key makes a second call a no-op."""
    job = send_invoice.enqueue(Invoice(invoice_id=invoice_id, email=email),
                               key=f"invoice:{invoice_id}", delay=60)
    return job.id
