"""`app.ledger(...)` end to end: real postings through a real worker; a SIGKILL after the
posting committed and before its step was stored, then the retried job posts once."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import (
    App,
    InvalidArgument,
    LedgerPostingConflict,
    LedgerUnbalanced,
    fresh_key,
)
from tests.processes import kill_and_wait_sessions, scalar, spawner, wait_for, wait_for_lock_wait
from tests.worker_helpers import running

app = App()  # the worker processes' app: `tests.test_ledger:app` ($SQLJOBS_DSN)
crash_book = app.ledger("books.crash")

SALE = [("cash", "EUR", "12.00"), ("sales", "EUR", "-10.00"), ("vat", "EUR", "-2.00")]


def ended(conn: psycopg.Connection[Any], job_id: int) -> tuple[str, Any, Any]:
    wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                            (job_id,)) in ("succeeded", "failed", "dead"), f"job {job_id}")
    row = conn.execute("select state::text, result, last_error from jobs.job where id = %s",
                       (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def postings(conn: psycopg.Connection[Any], ledger: str) -> int:
    return int(scalar(conn, "select count(*) from jobs.ledger_posting where ledger = %s",
                      (ledger,)))


def test_a_bad_posting_is_refused_before_anything_is_written(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)
    book = local.ledger("books.refused")
    before = scalar(conn, "select count(*) from jobs.job")
    with local:
        with pytest.raises(LedgerUnbalanced, match="EUR 1"):
            book.post("s1", [("cash", "EUR", "11"), ("sales", "EUR", "-10")])
        with pytest.raises(LedgerUnbalanced, match="USD"):
            book.post("s1", [("cash", "EUR", 5), ("sales", "USD", -5)])
        with pytest.raises(InvalidArgument, match="float"):
            book.post("s1", [("cash", "EUR", 0.1), ("sales", "EUR", -0.1)])
        with pytest.raises(InvalidArgument, match="line 2"):
            book.post("s1", [("cash", "EUR", 5), ("sales", "eur", -5)])
        with pytest.raises(InvalidArgument, match="2 to 1000"):
            book.post("s1", [])
    assert scalar(conn, "select count(*) from jobs.job") == before
    assert postings(conn, "books.refused") == 0


def test_a_posting_is_written_once_and_its_key_holds_only_its_lines(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)
    book = local.ledger("books.main")
    with local, running(local):
        first = book.post("sale-1", SALE, memo="order 1")
        again = book.post("sale-1", list(reversed(SALE)))
        state, result, _ = ended(conn, first.id)
        assert again.id == first.id and again.deduped, "the same posting is one job"
        assert state == "succeeded" and result["created"] is True
        other = book.post("sale-1", [("cash", "EUR", "13.00"), ("sales", "EUR", "-13.00")])
        state, _, error = ended(conn, other.id)
        assert state == "failed" and error["type"].endswith("LedgerPostingConflict")
        refund = book.post("refund-1", [("sales", "EUR", "10.00"), ("cash", "EUR", "-10.00")])
        ended(conn, refund.id)
    assert postings(conn, "books.main") == 2
    assert book.balance("cash", "EUR") == Decimal("2.00")
    assert book.balance("sales", "EUR") == Decimal("0.00")
    assert book.balance("vat", "EUR") == Decimal("-2.00")
    lines = book.posting("sale-1")
    assert [(x.account, x.amount, x.memo) for x in lines] == [
        ("cash", Decimal("12.00"), "order 1"), ("sales", Decimal("-10.00"), "order 1"),
        ("vat", Decimal("-2.00"), "order 1")]
    assert all(x.job_id == first.id for x in lines)
    assert issubclass(LedgerPostingConflict, Exception)


class Order(BaseModel):
    order: int


def test_post_in_writes_from_inside_another_job_as_one_step(
        db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    local = App(db_dsn)
    book = local.ledger("books.inner")

    @local.job(name="checkout")
    async def checkout(ctx: Any, payload: Order) -> Any:
        paid = await book.post_in(ctx, f"order-{payload.order}:paid",
                                  [("cash", "USD", 30), ("revenue", "USD", -30)])
        fee = await book.post_in(ctx, f"order-{payload.order}:fee",
                                 [("fees", "USD", "0.90"), ("cash", "USD", "-0.90")])
        return [paid["created"], fee["created"]]

    with local, running(local):
        job = checkout.enqueue({"order": 5}, key=fresh_key(), tenant="acme")
        state, result, _ = ended(conn, job.id)
    assert state == "succeeded" and result == [True, True]
    steps = conn.execute("select name from jobs.step where job_id = %s order by ordinal",
                         (job.id,)).fetchall()
    assert [s[0] for s in steps] == ["ledger:books.inner:order-5:paid",
                                     "ledger:books.inner:order-5:fee"]
    assert {(b.tenant, b.account, b.balance) for b in book.balances()} == {
        ("acme", "cash", Decimal("29.10")), ("acme", "fees", Decimal("0.90")),
        ("acme", "revenue", Decimal("-30"))}


@pytest.mark.slow
def test_sigkill_after_the_posting_committed_then_the_retried_job_posts_once(
        db_dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    app.pools.given = db_dsn
    with app:
        job = crash_book.post("crash-1", SALE)
    holder = psycopg.connect(db_dsn)  # holds the step table: the step's store must wait
    holder.execute("lock table jobs.step in share mode")
    args = ("tests.test_ledger:app", "--queue", "default", "--lease", "2",
            "--poll-interval", "0.2", "--concurrency", "1")
    try:
        with spawner(db_dsn, tmp_path, "worker") as start:
            # a backend waiting on a lock notices its client died only when it checks
            # the socket: have it check, as a server with this setting would
            first = start(*args, env={"PGOPTIONS": "-c client_connection_check_interval=100"})
            wait_for(lambda: postings(conn, "books.crash") == 1, "the posting committed")
            wait_for_lock_wait(conn, "%step_put%", "the step's store waiting")
            kill_and_wait_sessions(conn, first)
            holder.rollback()
            assert scalar(conn, "select count(*) from jobs.step where job_id = %s",
                          (job.id,)) == 0, "the step was stored before the kill"
            start(*args)
            state, result, _ = ended(conn, job.id)
    finally:
        holder.close()
    assert state == "succeeded"
    assert result == {"posting_id": result["posting_id"], "created": False}, \
        "the step ran again and found the posting"
    assert postings(conn, "books.crash") == 1
    assert scalar(conn, "select attempt from jobs.job where id = %s", (job.id,)) == 2
    assert scalar(conn, "select count(*) from jobs.ledger_line l join jobs.ledger_posting p "
                        "on p.id = l.posting_id where p.ledger = 'books.crash'") == 3


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any]) -> None:
    from examples.ledger import app as module

    example = module.app
    example.pools.given = db_dsn
    with example, running(example):
        job = module.checkout.enqueue(module.Checkout(order_id=1, total=Decimal("120.00")),
                                      key=fresh_key())
        state, _, _ = ended(conn, job.id)
        assert state == "succeeded"
        refunded = module.refund(1, Decimal("20.00"))
        state, _, _ = ended(conn, refunded.id)
        assert state == "succeeded"
    balances = {b.account: b.balance for b in module.books.balances()}
    assert balances == {"cash": Decimal("100.00"), "revenue": Decimal("-80.00"),
                        "vat-payable": Decimal("-20.00")}
