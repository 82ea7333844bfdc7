"""The chaos suite's SHORT profile (bench/chaos): a real fleet on a throwaway PostgreSQL
the suite starts itself (initdb + pg_ctl), every scenario (SIGKILLs with replacements,
SIGTERM drains, terminated backends, one server restart, a session idle in transaction
holding locks, the scheduler leader and relays killed, pool exhaustion, and limited and
tenant jobs on tenant-bound workers under SIGKILLs), a few thousand jobs. Fails on any
lost job, double settlement, durable step re-executed after its result was stored,
outbox row unpublished or relayed twice, schedule occurrence fired twice, or limit group
that ran more jobs at once than its limit.

It takes one to two minutes; each scenario says so when it starts (shown even under
pytest's output capture)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from bench.chaos.__main__ import main
from bench.chaos.run import LIMITS, PROFILES, failures, limit_figures


def test_the_short_chaos_profile_loses_nothing_and_settles_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "chaos.json"
    with capsys.disabled():
        print("\n[chaos short profile: eight scenarios, about two minutes]", flush=True)
        status = main(["--profile", "short", "--json", str(figures), "--deadline", "300",
                       "--logs", str(tmp_path / "logs")])
    assert status == 0, figures.read_text()
    outcomes = json.loads(figures.read_text())
    sigkill = outcomes["sigkill"]
    # The scenario lasts until its kills are sent (the queue is topped up meanwhile),
    # so they all land on any machine, and each held jobs that ran again.
    assert sigkill["kills"] == PROFILES["short"].kills, sigkill
    assert sigkill["jobs_held_at_kills"] > 0 and sigkill["recovery_s"]["n"] > 0, sigkill
    assert sigkill["recovery_s"]["max"] != float("inf"), sigkill
    assert sigkill["lease_recovered_s"]["n"] > 0, sigkill  # recovery took leases back
    # The schedule fired (so "no occurrence fired twice" is not vacuous): the scenario
    # lasts until its kills are sent, and its schedulers start with the fleet.
    assert sigkill["ticks_fired"] > 0, sigkill
    # The limits scenario: its kills all landed on workers holding limited jobs, and the
    # runs were read (its invariant, no group over its limit, is in the status above).
    limits = outcomes["limits"]
    assert limits["kills"] == max(PROFILES["short"].kills // 2, 1), limits
    assert limits["jobs_held_at_kills"] > 0 and limits["limited_runs"] > 0, limits
    assert limits["groups_over_limit"] == 0 and limits["runs_open"] == 0, limits


def test_the_limits_check_finds_a_group_that_ran_over_its_limit(db_dsn: str) -> None:
    """The limits scenario's invariant can fail: runs written by hand into its side
    tables, one account group three at once (its limit is 2)."""
    cap = LIMITS["chaos-acct"]["concurrency"]
    assert cap == 2
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("""
            create table public.chaos_run (job_id bigint, claim bigint, pid integer,
              acct text, tenant text, started_at timestamptz, ended_at timestamptz);
            create table public.chaos_kill (pid integer, at timestamptz)""")
        try:
            t = "2030-01-01 00:00:"
            runs = [  # a0: 2 at once, then a third that starts as one ends (not over)
                (1, 10, "a0", None, t + "00", t + "10"), (2, 10, "a0", None, t + "01", t + "05"),
                (3, 11, "a0", "t1", t + "05", t + "06"),
                # a1: the first run's process was killed at :09; the third starts at :08
                (4, 12, "a1", None, t + "00", None), (5, 10, "a1", None, t + "02", t + "20"),
            ]
            for job, pid, acct, tenant, start, end in runs:
                conn.execute("insert into public.chaos_run values (%s, 1, %s, %s, %s, %s, %s)",
                             (job, pid, acct, tenant, start, end))
            conn.execute("insert into public.chaos_kill values (12, %s)", (t + "09",))
            assert limit_figures(conn)["groups_over_limit"] == 0
            conn.execute("insert into public.chaos_run values (6, 1, 13, 'a1', null, %s, %s)",
                         (t + "08", t + "30"))
            figures = limit_figures(conn)
            assert figures["over_limit"] == ["chaos-acct|a1: 3 > 2"], figures
            assert figures["limit_peaks"]["chaos-acct"] == "3/2"
            assert failures(figures) == ["groups_over_limit = 1"]
            # a run neither ended nor killed counts to the end of time: over, too
            conn.execute("insert into public.chaos_run values (7, 1, 14, 'a2', null, %s, null),"
                         " (8, 1, 14, 'a2', null, %s, null), (9, 1, 14, 'a2', null, %s, %s)",
                         (t + "00", t + "01", t + "40", t + "41"))
            figures = limit_figures(conn)
            assert figures["runs_open"] == 2 and figures["groups_over_limit"] == 2, figures
        finally:
            conn.execute("drop table public.chaos_run, public.chaos_kill")
