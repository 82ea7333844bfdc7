"""`python -m bench.chaos [--profile short|medium|full] [--only sigkill,restart,...]`.

Starts a throwaway PostgreSQL (initdb + pg_ctl under a temp dir), runs each scenario on
a fresh database of it with a real fleet, and writes the figures: a JSON (--json) and,
with --report, bench/CHAOS.md. Exits 1 when anything must be zero and is not (lost,
settled twice, re-executed steps, outbox rows unpublished / relayed twice, ticks fired
twice, a limit group that ran more jobs at once than its limit). Scenarios: sigkill,
sigterm, terminate, restart, idle_lock, leader, exhaust, limits; each can be turned off
with --no-<name>.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench.chaos.cluster import Cluster
from bench.chaos.report import write_report
from bench.chaos.run import PROFILES, SCENARIOS, Outcome, dump, failures, run_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument("--jobs", type=int, help="override the profile's job count")
    parser.add_argument("--kills", type=int, help="override the profile's SIGKILL count")
    for name in SCENARIOS:
        parser.add_argument(f"--no-{name.replace('_', '-')}", dest=name, action="store_false",
                            help=f"skip the {name} scenario")
    parser.add_argument("--json", type=Path, default=Path("bench/chaos-results.json"))
    parser.add_argument("--report", type=Path, help="write the markdown report here")
    parser.add_argument("--logs", type=Path,
                        help="keep the fleet's logs here (default: a temporary folder, "
                             "removed after a run in which every check passed)")
    parser.add_argument("--deadline", type=float,
                        help="seconds one scenario may take before what is left counts as "
                             "lost (default: the profile's: 300 short, 1800 medium, 4800 full)")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.jobs:
        profile.jobs = args.jobs
    if args.kills:
        profile.kills = args.kills
    chosen = [name for name in SCENARIOS if getattr(args, name)]
    cluster = Cluster()
    logs = args.logs or Path(tempfile.mkdtemp(prefix="sqljobs-chaos-logs-"))
    outcomes: list[Outcome] = []
    bad: list[str] = []
    started = time.monotonic()
    try:
        cluster.start()
        # SIGKILL gets half of the jobs (its kills need a long run), the others share the rest
        rest = [name for name in chosen if name != "sigkill"]
        share = {name: (0.5 if rest else 1.0) if name == "sigkill" else
                 (0.5 if len(rest) < len(chosen) else 1.0) / len(rest) for name in chosen}
        for name in chosen:
            jobs = max(int(profile.jobs * share[name]), 100)
            outcome = run_scenario(cluster, name, profile, jobs, logs,
                                   args.deadline or profile.deadline_s)
            outcomes.append(outcome)
            problems = failures(outcome.figures)
            bad += [f"{name}: {p}" for p in problems]
            print(f"{name}: {outcome.figures}", flush=True)
    finally:
        cluster.stop()
    args.json.write_text(dump(outcomes))
    if args.report:
        write_report(args.report, profile, outcomes, time.monotonic() - started)
    for line in bad:
        print("FAILED", line, file=sys.stderr)
    if bad or args.logs:
        print(f"logs: {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    return 1 if bad else 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    # A SIGTERM (`kill` of this runner) unwinds like an interrupt: the scenario stops its
    # fleet and the throwaway cluster is stopped, instead of both running on orphaned.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
