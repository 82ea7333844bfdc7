"""Every way a watched job reaches a final state notifies its result waiter (jobs_settled):
lease recovery burying it, a saga unwind ending; a requeue ends the watch; and a relay
whose window spans every ordering key leaves keys to the other relays."""

from __future__ import annotations

from typing import Any

import psycopg

from sqljobs import fresh_key


def _settled_payloads(listener: psycopg.Connection[Any],
                      conn: psycopg.Connection[Any]) -> list[str]:
    conn.execute("select pg_notify('jobs_settled', 'end')")  # delivered in commit order
    got = []
    for notify in listener.notifies(timeout=10):
        if notify.payload == "end":
            break
        got.append(notify.payload)
    return got


def _token(conn: psycopg.Connection[Any], job_id: int) -> str:
    """What jobs_settled carries for the job (its watch token; never the id)."""
    row = conn.execute("select jobs.watch_token(%s)", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _enqueue(conn: psycopg.Connection[Any], queue: str, options: str = "{}") -> int:
    row = conn.execute("select id from jobs.enqueue('n.x', %s, '{}', "
                       "jsonb_build_object('queue', %s::text) || %s::jsonb)",
                       (fresh_key(), queue, options)).fetchone()
    assert row is not None
    return int(row[0])


def _claim(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute("select claim from jobs.claim(array[%s], 'w', 1, 30)", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def test_lease_recovery_burying_a_watched_job_notifies(conn: psycopg.Connection[Any],
                                                        db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("listen jobs_settled")
        conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
        watched = _enqueue(conn, "qr", '{"max_attempts": 1}')
        plain = _enqueue(conn, "qr", '{"max_attempts": 1}')
        conn.execute("select id from jobs.watch_outcome(%s)", (watched,))
        conn.execute("select id from jobs.claim(array['qr'], 'w', 2, 30)")
        # the worker died: 31 s on, a claim's RECOVER phase buries both (final attempt)
        conn.execute("set jobs.fake_now = '2030-01-01 00:00:31+00'")
        conn.execute("select id from jobs.claim(array['qr'], 'w2', 1, 30)")
        states = dict(conn.execute("select id, state::text from jobs.job").fetchall())
        assert states == {watched: "dead", plain: "dead"}
        assert _settled_payloads(listener, conn) == [_token(conn, watched)]


def test_lease_recovery_retrying_a_watched_job_does_not_notify(conn: psycopg.Connection[Any],
                                                                db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("listen jobs_settled")
        conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
        watched = _enqueue(conn, "qr", '{"max_attempts": 3}')
        conn.execute("select id from jobs.watch_outcome(%s)", (watched,))
        _claim(conn, "qr")
        conn.execute("set jobs.fake_now = '2030-01-01 00:00:31+00'")
        conn.execute("select id from jobs.claim(array['qr'], 'w2', 1, 30, %s)",
                 ('{"names": ["none"]}',))
        assert conn.execute("select state::text from jobs.job where id = %s",
                            (watched,)).fetchone() == ("ready",)
        assert _settled_payloads(listener, conn) == []


def _unwinding(conn: psycopg.Connection[Any], queue: str) -> tuple[int, int]:
    """A job with a compensable step that failed for good: compensating, still running."""
    job_id = _enqueue(conn, queue, '{"max_attempts": 1}')
    claim = _claim(conn, queue)
    conn.execute("select jobs.step_put(%s, %s, 'charge', %s, null, %s)",
                 (job_id, claim, '{"c": 1}', '{"compensable": true}'))
    conn.execute("select jobs.nack(%s, %s, null, 'fail')", (job_id, claim))
    row = conn.execute("select compensating, state::text from jobs.job where id = %s",
                       (job_id,)).fetchone()
    assert row == (True, "running")
    return job_id, claim


def test_the_end_of_a_saga_unwind_notifies_its_waiter_only(conn: psycopg.Connection[Any],
                                                            db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("listen jobs_settled")
        watched, watched_claim = _unwinding(conn, "qs")
        plain, plain_claim = _unwinding(conn, "qs")
        conn.execute("select id from jobs.watch_outcome(%s)", (watched,))
        assert _settled_payloads(listener, conn) == []  # compensating: not settled yet
        conn.execute("select jobs.step_unwound(%s, %s)", (plain, plain_claim))
        conn.execute("select jobs.step_unwound(%s, %s)", (watched, watched_claim))
        states = dict(conn.execute("select id, state::text from jobs.job").fetchall())
        assert states == {watched: "failed", plain: "failed"}
        assert _settled_payloads(listener, conn) == [_token(conn, watched)]


def test_a_requeue_ends_the_watch_and_a_new_waiter_renews_it(conn: psycopg.Connection[Any],
                                                              db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("listen jobs_settled")
        job_id = _enqueue(conn, "qq", '{"max_attempts": 1}')
        conn.execute("select id from jobs.watch_outcome(%s)", (job_id,))
        conn.execute("select jobs.nack(%s, %s, null, 'fail')", (job_id, _claim(conn, "qq")))
        # kept while final: retention keeps an awaited job for the awaited age
        assert conn.execute("select settle_watched from jobs.job").fetchone() == (True,)
        conn.execute("select jobs.requeue(array[%s::bigint])", (job_id,))
        assert conn.execute("select settle_watched from jobs.job").fetchone() == (False,)
        conn.execute("select jobs.nack(%s, %s, null, 'fail')", (job_id, _claim(conn, "qq")))
        # nobody waited on the second run: its settlement notifies nothing
        conn.execute("select jobs.requeue(array[%s::bigint])", (job_id,))
        conn.execute("select id from jobs.watch_outcome(%s)", (job_id,))
        conn.execute("select jobs.ack(%s, %s)", (job_id, _claim(conn, "qq")))
        assert _settled_payloads(listener, conn) == [_token(conn, job_id)] * 2


def test_a_relay_leaves_ordering_keys_to_the_other_relays(conn: psycopg.Connection[Any],
                                                          db_dsn: str) -> None:
    # 4 keys, 5 rows each, interleaved: A's window of 20 spans every key
    specs = ", ".join(f'{{"name": "ro.job", "key": "{k}-{i}", "ordering_key": "{k}"}}'
                      for i in range(5) for k in "abcd")
    conn.execute(f"select jobs.stage_many('[{specs}]')")
    assert conn.execute("select held from jobs.relay(20, 'A', 30)").fetchone() == (10,)
    with psycopg.connect(db_dsn, autocommit=True) as other:
        # B, on its own connection, finds the keys A left, and takes half of them in turn
        assert other.execute("select held from jobs.relay(20, 'B', 30)").fetchone() == (5,)
        assert other.execute("select held from jobs.relay(20, 'C', 30)").fetchone() == (5,)
    keys = conn.execute("select claimed_by, array_agg(distinct ordering_key order by ordering_key)"
                        " from jobs.outbox group by claimed_by order by claimed_by").fetchall()
    assert keys == [("A", ["a", "b"]), ("B", ["c"]), ("C", ["d"])]
    # each publishes its own rows, in stage order per key; no key is in flight in two
    for relay in "ABC":
        conn.execute("select published from jobs.relay(0, %s, 30)", (relay,))
    assert conn.execute("select count(*) from jobs.job").fetchone() == (20,)
    assert conn.execute("select count(*) from jobs.outbox o where exists (select from jobs.outbox p"
                        " where p.ordering_key = o.ordering_key and p.id < o.id"
                        " and p.published_at > o.published_at)").fetchone() == (0,)
