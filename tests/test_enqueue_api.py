"""Declarations and the enqueue API: validation first, in-transaction forms, batches."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import Session

import sqljobs
from sqljobs.alembic import sqlalchemy_url


class Email(BaseModel):
    to: str
    subject: str = "hello"


def make_app(dsn: str) -> tuple[sqljobs.App, Any]:
    app = sqljobs.App(dsn)

    @app.job(name="send_email", queue="mail", retry=sqljobs.RetryPolicy(max_attempts=3),
             timeout=5, priority=2)
    def send_email(ctx: Any, payload: Email) -> str:
        return payload.to

    return app, send_email


def job_count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select count(*) from jobs.job").fetchone()
    assert row is not None
    return int(row[0])


def test_enqueue_writes_the_declared_options(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    app, send_email = make_app(db_dsn)
    with app:
        job = send_email.enqueue(Email(to="a@example.com"), key="k1")
        again = send_email.enqueue({"to": "a@example.com"}, key="k1")
    assert job.outcome == "created" and not job.deduped
    assert again.deduped and again.id == job.id
    row = conn.execute(
        "select name, queue, priority, max_attempts, timeout_s, payload"
        " from jobs.job where id = %s",
        (job.id,),
    ).fetchone()
    assert row == ("send_email", "mail", 2, 3, 5.0, {"to": "a@example.com", "subject": "hello"})


def test_a_bad_payload_raises_before_anything_is_written(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    app, send_email = make_app(db_dsn)
    with app, pytest.raises(sqljobs.InvalidPayload) as caught:
        send_email.enqueue({"subject": "no recipient"}, key="k1")
    assert "to" in (caught.value.detail or "")
    with app, pytest.raises(sqljobs.InvalidPayload):
        send_email.enqueue_many([({"to": "ok"}, "a"), ({"nope": 1}, "b")])
    assert job_count(conn) == 0


def test_duplicate_job_names_are_refused_at_declaration(db_dsn: str) -> None:
    app, _ = make_app(db_dsn)
    with pytest.raises(sqljobs.ConfigurationError, match="already declared"):

        @app.job(name="send_email")
        def other(ctx: Any, payload: Email) -> None: ...


def test_a_handler_without_a_payload_model_is_refused(db_dsn: str) -> None:
    app = sqljobs.App(db_dsn)
    with pytest.raises(sqljobs.ConfigurationError, match="pydantic model"):

        @app.job(name="untyped")
        def untyped(ctx: Any, payload: dict[str, Any]) -> None: ...


def test_oversized_payloads_get_the_coded_error(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    app, send_email = make_app(db_dsn)
    with app, pytest.raises(sqljobs.PayloadTooLarge):
        send_email.enqueue({"to": "x" * 1_100_000}, key="big")
    assert job_count(conn) == 0


def test_enqueue_many_is_all_or_nothing_across_chunks(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    app, send_email = make_app(db_dsn)
    items = [({"to": f"u{i}"}, f"key-{i}") for i in range(2_500)]
    with app:
        result = send_email.enqueue_many(items)
        assert [r.outcome for r in result] == ["created"] * 2_500
        # The third chunk refuses (on_conflict=error on an existing key): nothing of the
        # first two chunks may remain.
        fresh = [({"to": "n"}, f"new-{i}") for i in range(2_000)] + [({"to": "x"}, "key-7")]
        with pytest.raises(sqljobs.DuplicateJob):
            send_email.enqueue_many(fresh, on_conflict="error")
    assert job_count(conn) == 2_500


def test_enqueue_inside_a_psycopg_transaction(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    app, send_email = make_app(db_dsn)
    with app, psycopg.connect(db_dsn) as caller:
        send_email.enqueue({"to": "rolled back"}, key="r", conn=caller)
        caller.rollback()
        committed = send_email.enqueue({"to": "committed"}, key="c", conn=caller)
        caller.commit()
    keys = [r[0] for r in conn.execute("select key from jobs.job order by key").fetchall()]
    assert keys == ["c"]
    assert committed.outcome == "created"


def test_enqueue_inside_a_sqlalchemy_session(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    app, send_email = make_app(db_dsn)
    engine = sa.create_engine(sqlalchemy_url(db_dsn))
    try:
        with app:
            with Session(engine) as session:
                send_email.enqueue({"to": "rolled back"}, key="r", conn=session)
                session.rollback()
            with Session(engine) as session, session.begin():
                session.execute(sa.text("select 1"))
                send_email.enqueue({"to": "committed"}, key="c", conn=session)
            with engine.connect() as connection:
                send_email.enqueue({"to": "never committed"}, key="n", conn=connection)
                connection.rollback()
    finally:
        engine.dispose()
    keys = [r[0] for r in conn.execute("select key from jobs.job order by key").fetchall()]
    assert keys == ["c"]


def test_async_enqueue_on_the_pool_and_in_a_transaction(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    app, send_email = make_app(db_dsn)

    async def scenario() -> list[sqljobs.Enqueued]:
        async with app:
            first = await send_email.enqueue_async({"to": "a"}, key="a")
            many = await send_email.enqueue_many_async([({"to": "b"}, "b"), ({"to": "a"}, "a")])
            async with await psycopg.AsyncConnection.connect(db_dsn) as caller:
                await send_email.enqueue_async({"to": "x"}, key="x", conn=caller)
                await caller.rollback()
            return [first, *many]

    first, b, a_again = asyncio.run(scenario())
    assert (first.outcome, b.outcome, a_again.outcome) == ("created", "created", "deduped")
    assert a_again.id == first.id
    assert job_count(conn) == 2


def test_a_foreign_connection_object_is_refused(db_dsn: str) -> None:
    app, send_email = make_app(db_dsn)
    with app, pytest.raises(sqljobs.ConfigurationError, match="psycopg"):
        send_email.enqueue({"to": "a"}, key="a", conn=object())


def test_fresh_key_is_explicit_and_unique() -> None:
    keys = {sqljobs.fresh_key() for _ in range(1000)}
    assert len(keys) == 1000
