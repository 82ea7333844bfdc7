"""Where a chaos run (`python -m bench.chaos`) leaves its fleet's logs: without --logs, in
a temporary folder that a clean run removes and a failed one keeps (and names).

A real run takes minutes (tests/test_chaos_short.py runs one, with --logs), so these
run the real `main` with the cluster and the scenario replaced: the scenario writes a log
into the folder it is given, as a fleet does, and answers the figures of a clean or a
failed run. The folder is a real one, under a temporary directory of the test's own.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import bench.chaos.__main__ as chaos
import pytest
from bench.chaos.run import Outcome


class NoCluster:
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temp dir, for the run: tmp_path/tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setattr(chaos, "Cluster", NoCluster)
    return folder


def scenario(figures: dict[str, Any], seen: list[Path]) -> Any:
    def run(cluster: Any, name: str, profile: Any, jobs: int, logs: Path,
            deadline: float) -> Outcome:
        seen.append(logs)
        (logs / f"{name}-worker0.log").write_text("a fleet's log\n")
        return Outcome(scenario=name, jobs=jobs, staged=0, figures=dict(figures))
    return run


def test_a_clean_run_without_logs_removes_its_temporary_log_folder(
        temp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(chaos, "run_scenario", scenario({"lost": 0, "settled_twice": 0}, seen))
    assert chaos.main(["--json", str(tmp_path / "chaos.json")]) == 0
    assert seen and all(folder.parent == temp for folder in seen), seen
    assert not seen[0].exists()
    assert list(temp.iterdir()) == []
    assert "logs:" not in capsys.readouterr().out


def test_a_failed_run_keeps_its_log_folder_and_names_it(
        temp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(chaos, "run_scenario", scenario({"lost": 2}, seen))
    assert chaos.main(["--json", str(tmp_path / "chaos.json")]) == 1
    assert seen[0].parent == temp
    assert (seen[0] / "sigkill-worker0.log").read_text() == "a fleet's log\n"
    assert f"logs: {seen[0]}" in capsys.readouterr().out


def test_logs_given_are_kept_after_a_clean_run(
        temp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Path] = []
    monkeypatch.setattr(chaos, "run_scenario", scenario({"lost": 0}, seen))
    kept = tmp_path / "kept"
    kept.mkdir()
    assert chaos.main(["--json", str(tmp_path / "chaos.json"), "--logs", str(kept)]) == 0
    assert set(seen) == {kept}
    assert (kept / "sigkill-worker0.log").exists()
    assert list(temp.iterdir()) == []
