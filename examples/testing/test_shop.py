"""Testing the shop's jobs with sqljobs.testing: run with `pytest -p sqljobs.testing`."""

from __future__ import annotations

import pytest

from examples.testing.shop import (
    Mail,
    Order,
    app,
    charges,
    checkout,
    daily_digest,
    place_order,
    send_mail,
)
from sqljobs.testing import (
    TestDatabase,
    assert_enqueued,
    drain,
    perform,
    refute_enqueued,
)


@pytest.fixture(autouse=True)
def shop_db(sqljobs_db: TestDatabase) -> TestDatabase:
    sqljobs_db.use(app)  # the app's pool opens on this test's database
    charges.clear()
    return sqljobs_db


def test_placing_an_order_enqueues_its_checkout() -> None:
    place_order(Order(order_id="A1", email="ann@example.com", amount=30))
    assert_enqueued(checkout, payload={"order_id": "A1"}, queue="orders")
    refute_enqueued(send_mail)


def test_a_checkout_charges_and_mails_a_receipt() -> None:
    place_order(Order(order_id="A1", email="ann@example.com", amount=30))
    drained = drain(app)
    # the parent parks while its child (the receipt) runs, then finishes
    assert [(o.name, o.outcome) for o in drained.outcomes] == [
        (checkout.name, "parked"), (send_mail.name, "succeeded"), (checkout.name, "succeeded")]
    assert charges == {"A1": 30}


def test_a_failed_shipment_refunds_the_charge() -> None:
    place_order(Order(order_id="B2", email="bob@example.com", amount=5000))
    drained = drain(app)
    assert drained.counts == {"compensated": 1}
    assert charges == {}  # charged, then refunded by the compensation


def test_a_bounced_mail_is_retried_an_hour_later(shop_db: TestDatabase) -> None:
    send_mail.enqueue(Mail(to="x@bounce.example", subject="hi"), key="m1")
    assert drain(app).counts == {"retried": 1}
    assert drain(app).counts == {}  # its retry is due later, not now
    shop_db.clock.advance(3600)
    assert drain(app).counts == {"retried": 1}
    assert drain(app, with_scheduled=True).counts == {"dead": 1}


def test_the_daily_digest_fires_at_eight(shop_db: TestDatabase) -> None:
    drain(app, cron=True)  # registers the task: nothing is due yet
    shop_db.clock.advance(24 * 3600)
    drained = drain(app, cron=True)
    assert drained.fired == 1
    assert [o.name for o in drained.outcomes] == [daily_digest.name, send_mail.name]


def test_perform_runs_one_handler_without_a_queue() -> None:
    assert perform(send_mail, {"to": "ann@example.com", "subject": "hi"}) == {
        "sent_to": "ann@example.com"}
    with pytest.raises(ConnectionError):
        perform(send_mail, Mail(to="x@bounce.example", subject="hi"))
