"""The package's layers hold (docs/design/package-layers.md).

* the import-linter contracts in pyproject.toml are kept: no lower layer imports a
  higher one, not even inside a function or for type checking only, with no exemption;
* no two modules import each other, directly or through others, type-only imports
  included;
* `import sqljobs` loads the client, declaration and app layers and the public
  modules only: not the runtime, the command line, the dev tools or any optional extra;
* the public names are the ones documented, each importable from `sqljobs`, and every
  module a user may import is public (the private ones start with `_`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grimp

import sqljobs

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = {
    "App", "AsyncClient", "BackfillBusy", "BackfillChecksumChanged",
    "BackfillEnvironmentRefused", "BackfillError", "BackfillHandle", "BackfillNotFound",
    "BackfillRequiresUnmet", "BackfillStalled", "BackfillState", "Batch", "BulkMoved",
    "CitusRequired",
    "CitusWorkerNode",
    "JobsBeforeBuckets",
    "ClaimedJob", "Client", "ConfigurationError", "PurgeHandle", "PurgeTable",
    "ImportPage", "TransferRefused", "Document", "PostgresSearchIndex", "SearchIndex",
    "DatabaseError", "DuplicateJob", "Enqueued", "Event", "EventTimeout", "InvalidArgument",
    "InvalidPayload", "JobCancelled", "JobContext", "JobDead", "JobError", "JobFailed",
    "JobFinished", "JobHandle", "JobLive", "JobNotFound", "JobNotRequeueable", "JobRecord",
    "JobRunning", "JobSpec", "JobState", "KeyBusy", "LeaseLost", "LimitNotFound", "LockBusy",
    "LockLost", "NotLeader", "PayloadTooLarge",
    "QueueStats", "QueuesRequired", "Relay", "ReservedStepName", "ResultTimeout", "Retry",
    "RetryPolicy", "RunCancelled", "ScheduleNotFound", "Scheduler", "SchemaError", "Settled",
    "Snooze",
    "SqljobsError", "Staged", "StepNameReused", "StepTimeout", "Steps", "TenantRefused",
    "UnknownJob", "Worker", "fresh_key", "key", "queries",
    "AsyncLock", "Lock", "Limits", "Schedules", "errors", "records",  # run-time managers
    "SettingRefused", "WorkerIdTaken",  # trust boundaries
    "ReplayDiverged", "StepNotFound",  # deploys: replay checks, forks
    "SettledJob", "TenantPolicyRefused",  # the run's lifecycle: hooks, tenant policy
    "InvalidActor",  # the actor: who asked for a job
    "InvalidJobType", "JobTypeNotFound", "PersonalData", "Sensitive",  # redaction
    "InvalidRetention", "UnknownRetentionKey",  # retention
    "WebhookDisabled", "WebhookError", "WebhookEvent", "WebhookFailed", "WebhookHandle",
    "WebhookReceiver", "WebhookRejected", "WebhookTenantRefused", "ReceivedEvent",  # webhooks
    "LedgerError", "LedgerHandle", "LedgerPostingConflict", "LedgerUnbalanced",  # ledger
    "ConsumerBatch", "ConsumerFenced", "ConsumerHandle", "ConsumerSelfEnqueue", "Source",
    "TableSource",  # consumers
    "SCHEMA_VERSION", "redact",  # what the docs and examples needed of private modules
}


def test_the_layer_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    assert lint_imports.is_file(), "import-linter is not installed (the test extra has it)"
    out = subprocess.run([str(lint_imports), "--no-cache", str(ROOT / "pyproject.toml")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "4 kept, 0 broken" in out.stdout, out.stdout[-2000:]


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph("sqljobs", exclude_type_checking_imports=False)
    # A package's __init__ re-exporting its own modules is not a circle between concerns.
    for package in ("sqljobs", "sqljobs._cli", "sqljobs._runtime.worker", "sqljobs._app"):
        for child in graph.find_children(package):
            if graph.direct_import_exists(importer=child, imported=package):
                graph.remove_import(importer=child, imported=package)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == [["p.a", "p.b"]]


def test_importing_sqljobs_loads_neither_the_runtime_nor_the_cli_nor_extras() -> None:
    code = ("import json, sys, sqljobs; "
            "print(json.dumps(sorted(m for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    loaded = set(json.loads(out.stdout))
    ours = {m for m in loaded if m == "sqljobs" or m.startswith("sqljobs.")}
    assert ours, "sqljobs itself did not load"
    public = ("sqljobs.queries", "sqljobs.records", "sqljobs.errors")
    assert all(m == "sqljobs" or m in public or m.startswith(
        ("sqljobs._version", "sqljobs._client", "sqljobs._declare", "sqljobs._app"))
        for m in ours), sorted(ours)
    for heavy in ("typer", "rich", "alembic", "sqlalchemy", "prometheus_client",
                  "opentelemetry", "starlette", "fastapi"):
        assert heavy not in loaded, f"import sqljobs loaded {heavy}"


def test_the_cli_loads_alembic_only_for_the_commands_that_migrate() -> None:
    # A restarted worker's jobs wait for it while it starts: the CLI that starts it
    # loads no schema tooling (Alembic and SQLAlchemy were about 40% of its start-up).
    code = ("import json, sys; from sqljobs._cli import main; "
            "print(json.dumps(sorted(m for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    loaded = set(json.loads(out.stdout))
    assert "sqljobs._cli.main" in loaded, "the CLI did not load"
    for heavy in ("alembic", "sqlalchemy"):
        assert heavy not in loaded, f"the CLI loaded {heavy} before any command ran"


def test_the_public_names_are_exported_and_resolve() -> None:
    assert set(sqljobs.__all__) == PUBLIC
    for name in sorted(PUBLIC):
        assert getattr(sqljobs, name) is not None, name
    assert sqljobs.Worker.__module__ == "sqljobs._runtime.worker.worker"


def test_every_module_is_private_but_the_documented_public_ones() -> None:
    public = {"sqljobs", "sqljobs.alembic", "sqljobs.queries", "sqljobs.records",
              "sqljobs.errors", "sqljobs.metrics", "sqljobs.tracing", "sqljobs.dashboard",
              "sqljobs.testing", "sqljobs.contrib", "sqljobs.contrib.django"}
    graph = grimp.build_graph("sqljobs")
    exposed = {m for m in graph.modules
               if not any(part.startswith("_") for part in m.split(".")[1:])}
    # Django finds an app's parts by these names: they cannot start with `_`
    django_names = ("apps", "models", "admin", "migrations", "management")
    exposed = {m for m in exposed
               if m.split(".")[:3] != ["sqljobs", "contrib", "django"] or len(m.split(".")) == 3
               or m.split(".")[3] not in django_names}
    assert exposed == public, sorted(exposed ^ public)
