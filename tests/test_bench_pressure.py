"""The pressure part of the benchmark suite (bench/pressure.py), end to end on a very
short profile: sqljobs through all four cells (as_is, a snapshot held idle in
transaction, a reader scanning its job table, a tenfold burst), each a few seconds.

It asserts what the cells are made of, never a speed: every job ran, every window is
there with the database sampled in it, the snapshot was held to the end (its xmin age
grows while the load runs), the reader scanned, the burst offered ten times the rate,
and the section and its per-window tables were written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import __main__ as bench_main

pytestmark = pytest.mark.slow


def test_the_short_pressure_cells_run_and_record_every_window(
        pg_admin_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench_main, "OUT", tmp_path / "out")
    results = tmp_path / "RESULTS.md"
    with capsys.disabled():
        print("\n[pressure part, short: sqljobs in four cells of 6 s]", flush=True)
        status = bench_main.main([
            "--part", "pressure", "--pressure-profile", "short", "--system", "sqljobs",
            "--pressure-seconds", "6", "--pressure-window", "3", "--pressure-rate", "50",
            "--dsn", pg_admin_dsn, "--results", str(results)])
    assert status == 0
    data = json.loads((tmp_path / "out" / "pressure.json").read_text())
    assert data["meta"]["failed"] == {} and data["meta"]["skipped"] == {}, data["meta"]
    runs = {m["workload"]: m for m in data["runs"]}
    assert set(runs) == {"as_is", "snapshot", "reader", "burst"}
    for cell, m in runs.items():
        assert m["system"] == "sqljobs" and m["extra"]["errors"] == [], (cell, m["extra"])
        windows = m["extra"]["windows"]
        assert len(windows) >= 2, (cell, windows)
        # every offered job was enqueued and picked up, and counted in some window
        assert sum(w["enqueued"] for w in windows) == m["values"]["jobs"], cell
        assert sum(w["jobs"] for w in windows) == m["values"]["jobs"], cell
        assert all(w["table_bytes"] is not None and w["table_bytes"] > 0
                   and w["dead"] is not None and w["dead"] >= 0 for w in windows), windows
        busy = [w for w in windows if w["jobs"]]
        assert all(0 < w["p50_ms"] <= w["p99_ms"] for w in busy), busy
    assert runs["burst"]["values"]["jobs"] > runs["as_is"]["values"]["jobs"]
    assert runs["burst"]["values"]["burst"]["factor"] == 10
    held = runs["snapshot"]["extra"]["pressure"]
    assert held["snapshot_unchanged"] and held["snapshot_held_s"] > 0, held
    # the held snapshot pins the database's xmin: its age grows while the load commits
    ages = [w["xmin_age"] for w in runs["snapshot"]["extra"]["windows"]]
    assert ages[-1] > ages[0] >= 0, ages
    assert runs["reader"]["extra"]["pressure"]["reader_scans"] > 0
    text = results.read_text()
    assert "## Pressure cells" in text and "#### snapshot" in text
    assert "| snapshot | sqljobs |" in text and "snapshot held" in text


def test_a_run_not_written_to_the_results_leaves_their_plot_alone(
        pg_admin_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-results prints its section and draws its plot (where matplotlib is
    installed) in the scratch directory: a plot beside RESULTS.md is the recorded run's,
    neither replaced nor removed."""
    monkeypatch.setattr(bench_main, "OUT", tmp_path / "out")
    recorded = tmp_path / "pressure.png"
    recorded.write_bytes(b"the recorded run's plot")
    status = bench_main.main([
        "--part", "pressure", "--pressure-profile", "short", "--system", "sqljobs",
        "--cell", "as_is", "--pressure-seconds", "4", "--pressure-window", "2",
        "--pressure-rate", "50", "--dsn", pg_admin_dsn,
        "--results", str(tmp_path / "RESULTS.md"), "--no-results"])
    assert status == 0
    assert recorded.read_bytes() == b"the recorded run's plot"
    assert not (tmp_path / "RESULTS.md").exists()
