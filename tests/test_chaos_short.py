"""The chaos suite's SHORT profile (bench/chaos): a real fleet on a throwaway PostgreSQL
the suite starts itself (initdb + pg_ctl), every scenario (SIGKILLs with replacements,
SIGTERM drains, terminated backends, one server restart, a session idle in transaction
holding locks, the scheduler leader and relays killed), a few thousand jobs. Fails on any
lost job, double settlement, durable step re-executed after its result was stored,
outbox row unpublished or relayed twice, or schedule occurrence fired twice.

It takes one to two minutes; each scenario says so when it starts (shown even under
pytest's output capture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.chaos.__main__ import main
from bench.chaos.run import PROFILES


def test_the_short_chaos_profile_loses_nothing_and_settles_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "chaos.json"
    with capsys.disabled():
        print("\n[chaos short profile: seven scenarios, one to two minutes]", flush=True)
        status = main(["--profile", "short", "--json", str(figures), "--deadline", "300",
                       "--logs", str(tmp_path / "logs")])
    assert status == 0, figures.read_text()
    sigkill = json.loads(figures.read_text())["sigkill"]
    # The scenario lasts until its kills are sent (the queue is topped up meanwhile),
    # so they all land on any machine, and each held jobs that ran again.
    assert sigkill["kills"] == PROFILES["short"].kills, sigkill
    assert sigkill["jobs_held_at_kills"] > 0 and sigkill["recovery_s"]["n"] > 0, sigkill
    assert sigkill["recovery_s"]["max"] != float("inf"), sigkill
