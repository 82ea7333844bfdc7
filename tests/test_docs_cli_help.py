"""What a newcomer's first commands print: `--version`, help screens without noise."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from sqljobs._version import SCHEMA_VERSION


def sqljobs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("sqljobs")), *args], capture_output=True, text=True,
        env={"PATH": "", "LANG": "C.UTF-8", "COLUMNS": "100"},
    )


def test_version_option_prints_what_the_version_command_prints() -> None:
    option, command = sqljobs("--version"), sqljobs("version")
    assert option.returncode == 0, option.stderr
    assert option.stdout == command.stdout
    expected = f"sqljobs {version('sqljobs')} (schema version {SCHEMA_VERSION})"
    assert option.stdout.strip() == expected


def test_flags_show_no_value_type_in_help() -> None:
    for args in ([], ["jobs", "list"], ["worker"], ["dev", "start"]):
        shown = sqljobs(*args, "--help")
        assert shown.returncode == 0, shown.stderr
        assert "--help" in shown.stdout
        assert "<bool>" not in shown.stdout, args


def test_demo_help_summary_is_a_whole_sentence() -> None:
    listing = sqljobs("--help").stdout
    entry = listing.split("│ demo", 1)[1].split("│ relay", 1)[0]
    summary = " ".join(part.strip(" │") for part in entry.splitlines())
    assert summary.strip().endswith("the jobs stay in the database."), summary
