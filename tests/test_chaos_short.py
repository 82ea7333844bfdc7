"""The chaos suite's SHORT profile (bench/chaos): a real fleet on a throwaway PostgreSQL
the suite starts itself (initdb + pg_ctl), every scenario (SIGKILLs with replacements,
SIGTERM drains, terminated backends, one server restart, a session idle in transaction
holding locks, the scheduler leader and relays killed), a few thousand jobs. Fails on any
lost job, double settlement, durable step re-executed after its result was stored,
outbox row unpublished or relayed twice, or schedule occurrence fired twice."""

from __future__ import annotations

from pathlib import Path

from bench.chaos.__main__ import main


def test_the_short_chaos_profile_loses_nothing_and_settles_once(tmp_path: Path) -> None:
    figures = tmp_path / "chaos.json"
    assert main(["--profile", "short", "--json", str(figures), "--deadline", "300"]) == 0, \
        figures.read_text()
    text = figures.read_text()
    assert '"kills": 24' in text and '"recovery_s"' in text  # the faults did land
