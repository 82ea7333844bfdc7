"""The ported task's tests, with sqljobs.testing (`pytest -p sqljobs.testing`)."""

from __future__ import annotations

import pytest

from examples.from_celery import billing
from examples.from_celery.billing import app, bill, send_invoice
from sqljobs.testing import TestDatabase, assert_enqueued, drain


@pytest.fixture(autouse=True)
def billing_db(sqljobs_db: TestDatabase) -> TestDatabase:
    sqljobs_db.use(app)
    billing.rendered.clear()
    billing.mailbox.clear()
    billing.mail_server_down[0] = False
    return sqljobs_db


def test_billing_twice_makes_one_job() -> None:
    assert bill(42, "ann@example.com") == bill(42, "ann@example.com")
    assert_enqueued(send_invoice, payload={"invoice_id": 42})


def test_the_invoice_goes_out_after_its_countdown(billing_db: TestDatabase) -> None:
    job_id = bill(42, "ann@example.com")
    assert drain(app).counts == {}  # not due for a minute
    billing_db.clock.advance(60)
    assert drain(app).counts == {"succeeded": 1}
    assert billing.mailbox == [("ann@example.com", "invoices/42.pdf")]
    assert app.result(job_id) == "sent 42"


def test_a_retry_does_not_render_again(billing_db: TestDatabase) -> None:
    bill(7, "bob@example.com")
    billing_db.clock.advance(60)
    billing.mail_server_down[0] = True
    assert drain(app).counts == {"retried": 1}
    billing.mail_server_down[0] = False
    assert drain(app, with_scheduled=True).counts == {"succeeded": 1}
    assert billing.rendered == [7]  # the stored step, replayed
    assert billing.mailbox == [("bob@example.com", "invoices/7.pdf")]
