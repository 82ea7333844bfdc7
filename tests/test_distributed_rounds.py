"""Claims, lease recovery, nacks, a batch settle's and the verbs' locks in rounds per
shard, and by-id writes that name the bucket, as a distributed install runs them
(jobs.distributed(); docs/design/citus.md), on one PostgreSQL: this module's database
answers jobs.distributed() true and maps the 256 buckets to 16 shards of 16 (Citus's
map is by hash; `SHARDS`), and every file of sqltests/ but the claim cursor's, and the
busy-row and race tests (tests/test_busy_rows_and_recovery.py, test_races.py, real
concurrent connections), must pass on it unchanged: the rounds make the same moves as
the one statement. What they relax (the order across shards, the claim cursor) is
pinned here. On Citus each round is a statement routed to one shard
(tests/test_citus_distributed.py and bench/citus_probe.py run them there).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from pytest_pgtap.pgtap import Runner
from pytest_pgtap.plugin.core import report_tap

from sqljobs._client import queries
from sqljobs._client.connection import Client
from tests.processes import scalar
from tests.test_busy_rows_and_recovery import (  # noqa: F401  the same tests, in rounds
    locker,
    release_table,
    test_a_batch_ack_that_waits_on_more_than_its_rows_is_redone_and_answers_the_same,
    test_a_batch_settles_what_is_not_locked_and_answers_busy_for_the_rest,
    test_a_busy_worker_recovers_a_dead_workers_lapsed_leases_without_claiming,
    test_a_held_settle_key_keeps_lease_recovery_off_a_busy_job,
    test_a_locked_row_does_not_hold_back_the_rest_of_a_workers_acks,
    test_a_run_whose_row_stays_locked_past_its_lease_goes_on_and_runs_once,
    test_an_outcome_whose_row_is_locked_past_its_lease_is_written_not_run_again,
    test_naming_a_job_under_a_claim_not_its_own_locks_nothing,
    test_only_a_running_jobs_settle_key_under_its_claim_is_held,
    test_the_one_job_ack_waits_for_the_lock_and_then_settles,
    worker_conn,
)
from tests.test_races import (  # noqa: F401  concurrent claims and recovery, in rounds
    test_a_lapsed_lease_locked_elsewhere_does_not_block_recovery,
    test_a_row_lock_held_elsewhere_does_not_block_claim,
    test_ack_and_reclaim_at_the_same_moment_have_exactly_one_winner,
    test_eight_sessions_claim_ten_thousand_jobs_each_exactly_once,
)

SQLTESTS = Path(__file__).resolve().parent.parent / "sqltests"
# Every file, but the claim cursor's: a distributed claim reads no cursor (the relaxation,
# pinned below).
ROUNDS_FILES = sorted(p.name for p in SQLTESTS.glob("test_*.sql")
                      if p.name != "test_claim_cursor.sql")


# What the distributing step makes of jobs.distributed() and jobs.shard_buckets
# (sqljobs/_schema/distributed.py), without Citus: the shard of a bucket is its low 4 bits.
SHARDS = """
create or replace function jobs.distributed() returns boolean language sql immutable
security definer set search_path = '' as $$ select true $$;
revoke all on function jobs.distributed() from public;
create or replace function jobs.shard_buckets(p_bucket smallint) returns smallint[]
language sql immutable security definer set search_path = ''
as $$ select array(select b::smallint from pg_catalog.generate_series(p_bucket & 15, 255, 16) b) $$;
revoke all on function jobs.shard_buckets(smallint) from public;
"""


@pytest.fixture(scope="module", autouse=True)
def in_rounds(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(SHARDS)


def test_this_module_runs_in_rounds(conn: psycopg.Connection[Any]) -> None:
    assert scalar(conn, "select jobs.distributed()") is True
    # a batch's ids by shard, in the order of their least bucket
    assert conn.execute("select buckets[1], ids from jobs.ids_by_shard('{273, 17, 2, 530}')"
                        ).fetchall() == [(1, [273, 17]), (2, [2, 530])]


@pytest.fixture(scope="module")
def tap(db_dsn: str) -> Iterator[Runner]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute((SQLTESTS / "_helpers.sql").read_bytes())
        yield Runner(conn)


@pytest.mark.parametrize("name", ROUNDS_FILES)
def test_a_sql_file_passes_in_rounds(tap: Runner, name: str,
                                     request: pytest.FixtureRequest) -> None:
    lines = tap.run((SQLTESTS / name).read_text(encoding="utf-8"))
    report_tap(request.node, lines, name)


def test_one_call_recovers_across_buckets_up_to_its_limit(conn: psycopg.Connection[Any]) -> None:
    """Jobs of four tenants sit in four buckets: one call takes at most `limit` of
    them, oldest lease first, over as many rounds as buckets; a bound session only its
    tenant's."""
    client = Client(conn)
    conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
    for tenant in ("t1", "t2", "t3", "t4"):
        client.run(queries.enqueue("rounds.job", tenant, {},
                                   {"queue": "rounds", "tenant": tenant}))
        client.run(queries.claim(["rounds"], "w", 1, 10 + int(tenant[1])))
    assert scalar(conn, "select count(distinct bucket) from jobs.job "
                        "where state = 'running'") == 4
    conn.execute("set jobs.fake_now = '2030-01-01 00:01:00+00'")
    conn.execute("set sqljobs.tenant = 't4'")
    assert scalar(conn, "select jobs.recover('{rounds}')") == 1
    conn.execute("reset sqljobs.tenant")
    assert scalar(conn, "select jobs.recover('{rounds}', 2)") == 2
    # the oldest leases (t1's, then t2's) went first
    assert scalar(conn, "select string_agg(key, ',' order by key) from jobs.job "
                        "where state = 'ready'") == "t1,t2,t4"
    assert scalar(conn, "select jobs.recover('{rounds}')") == 1
    assert scalar(conn, "select count(*) from jobs.job where state = 'ready' "
                        "and attempts->0->>'outcome' = 'lease_expired'") == 4


def test_a_claim_takes_the_first_jobs_shard_first(conn: psycopg.Connection[Any]) -> None:
    """The relaxation of order: a claim starts with the first job in line and fills up
    from that job's shard, then from the next shard's, so priority and run_at order
    hold within a shard, not across (a tenant is one bucket, so one shard)."""
    client = Client(conn)
    conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
    for key, tenant, delay in (("a1", "acme", 0), ("b1", "bolt", 1), ("a2", "acme", 2),
                               ("b2", "bolt", 3)):
        client.run(queries.enqueue("order.job", key, {},
                                   {"queue": "ord", "delay_s": delay, "tenant": tenant}))
    assert scalar(conn, "select count(distinct bucket) from jobs.job where queue = 'ord'") == 2
    conn.execute("set jobs.fake_now = '2030-01-01 00:01:00+00'")
    rows = conn.execute("select key from jobs.claim_v2('{ord}', 'w', 3, 30)").fetchall()
    assert [key for (key,) in rows] == ["a1", "a2", "b1"]


def test_a_round_fills_up_from_every_bucket_of_its_shard(conn: psycopg.Connection[Any]) -> None:
    """t2 and t3 are two buckets (123, 187) of one shard (11), acme's bucket (110) is on
    another: after t2's job, the claim takes t3's, later in line than acme's."""
    client = Client(conn)
    conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
    for key, tenant, delay in (("first", "t2", 0), ("other", "acme", 1), ("same", "t3", 2)):
        client.run(queries.enqueue("shard.job", key, {},
                                   {"queue": "shard", "delay_s": delay, "tenant": tenant}))
    assert conn.execute("select key, bucket, bucket & 15 from jobs.job where queue = 'shard' "
                        "order by run_at").fetchall() == [
        ("first", 123, 11), ("other", 110, 14), ("same", 187, 11)]
    conn.execute("set jobs.fake_now = '2030-01-01 00:01:00+00'")
    rows = conn.execute("select key from jobs.claim_v2('{shard}', 'w', 2, 30)").fetchall()
    assert [key for (key,) in rows] == ["first", "same"]


def test_a_claim_reads_no_cursor_in_rounds(conn: psycopg.Connection[Any]) -> None:
    """The relaxation: a distributed claim reads every bucket's head, so a cursor
    (options.after) leaves nothing behind it; claim order (priority, run_at, id) holds
    over what it read."""
    client = Client(conn)
    conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
    # (three tenants on three shards: 3, 9 and 14)
    for key, delay, priority, tenant in (("early", 0, 0, "t1"), ("late", 10, 0, "t4"),
                                         ("urgent", 5, -1, "acme")):
        client.run(queries.enqueue("cursor.job", key, {},
                                   {"queue": "cur", "delay_s": delay, "priority": priority,
                                    "tenant": tenant}))
    conn.execute("set jobs.fake_now = '2030-01-01 00:01:00+00'")
    after = {"cur": [0, "2030-01-01T00:00:09+00:00"]}  # behind "early", level with "late"
    # nor does a worker's look behind its cursor find anything to go back for
    assert scalar(conn, "select jobs.claimable_behind('{cur}', %s)", (Jsonb(after),)) == []
    rows = conn.execute("select key from jobs.claim_v2('{cur}', 'w', 3, 30, %s)",
                        (Jsonb({"after": after}),)).fetchall()
    assert [key for (key,) in rows] == ["urgent", "early", "late"]
