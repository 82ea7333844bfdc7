"""A shop's books: each paid order posts cash, revenue and VAT in one durable step, and a
refund posts the reverse; balances are read per account.

    sqljobs worker examples.ledger.app:app
    python -m examples.ledger.app            # enqueues a checkout, then prints balances
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN
books = app.ledger("shop.books")


class Checkout(BaseModel):
    order_id: int
    total: Decimal  # VAT included
    vat_rate: Decimal = Decimal("0.20")


@app.job(name="shop.checkout")
async def checkout(ctx: sqljobs.JobContext, order: Checkout) -> dict[str, object]:
    vat = (order.total * order.vat_rate / (1 + order.vat_rate)).quantize(Decimal("0.01"))
    # ONE durable step: a crash after the posting and before the step is stored runs the
    # step again, which finds the posting under its key instead of writing a second one.
    posted = await books.post_in(ctx, f"order-{order.order_id}", [
        ("cash", "EUR", order.total),
        ("revenue", "EUR", -(order.total - vat)),
        ("vat-payable", "EUR", -vat),
    ], memo=f"checkout of order {order.order_id}")
    return {"posting": posted["posting_id"]}


def refund(order_id: int, amount: Decimal) -> sqljobs.Enqueued:
    """A refund is another posting (postings are never changed), as the ledger's own job."""
    return books.post(f"refund-{order_id}", [("revenue", "EUR", amount),
                                             ("cash", "EUR", -amount)])


if __name__ == "__main__":
    with app:
        job = checkout.enqueue(Checkout(order_id=1, total=Decimal("120.00")), key="order-1")
        app.result(job.id, timeout=60)
        for row in books.balances():
            print(f"{row.account:12} {row.currency} {row.balance:>10}")
