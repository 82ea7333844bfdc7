"""python -m bench: run the workloads and the pgbench ceilings, write RESULTS.md.

    python -m bench                                  # everything, 3 repeats
    python -m bench --workload drain --repeat 5      # one workload
    python -m bench --workload enqueue_single --workload ceiling
    python -m bench --runtime                        # each system's own worker, with peers
    python -m bench --workload drain_runtime --system sqljobs --system pgqueuer

Each repeat of a workload runs in a fresh database sqljobs_bench_<workload> made from
the admin DSN (--dsn, else $SQLJOBS_BENCH_DSN, else the local postgres database).
Repeats are interleaved (all workloads once, then again) so a burst of load on a
shared machine hits every workload alike.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bench import ceiling, db, runtime, workloads
from bench.adapters import ADAPTERS, get_adapter
from bench.report import Results, render

HERE = Path(__file__).resolve().parent
CHOICES = [*workloads.WORKLOADS, *runtime.RUNTIME_WORKLOADS, "ceiling", "all"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", choices=CHOICES,
                        help="a workload, 'ceiling' or 'all' (default); repeatable")
    parser.add_argument("--repeat", type=int, default=3, help="repeats of each (default 3)")
    parser.add_argument("--dsn", default=db.admin_dsn_from_env(),
                        help="admin DSN; bench databases are created next to it "
                             "(default $SQLJOBS_BENCH_DSN or the local postgres database)")
    parser.add_argument("--adapter", default="sqljobs", choices=ADAPTERS)
    parser.add_argument("--ceiling-seconds", type=int, default=10,
                        help="pgbench -T for each ceiling (default 10)")
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md",
                        help="where to write the report (default bench/RESULTS.md)")
    parser.add_argument("--no-results", action="store_true", help="print only")
    parser.add_argument("--keep", action="store_true",
                        help="keep each workload's database after its last repeat")
    parser.add_argument("--runtime", action="store_true",
                        help="run the runtime workloads (drain_runtime, latency_runtime) "
                             "for sqljobs and every peer, interleaved, and rewrite only "
                             "the runtime section of RESULTS.md")
    parser.add_argument("--system", action="append", choices=list(runtime.SYSTEMS),
                        help="runtime workloads: only these systems (repeatable)")
    parser.add_argument("--upgrade-peers", action="store_true",
                        help="reinstall each peer's latest release first")
    args = parser.parse_args(argv)
    chosen_rt = [n for n in runtime.RUNTIME_WORKLOADS
                 if args.runtime or n in (args.workload or [])]
    if chosen_rt:
        return main_runtime(args, chosen_rt, argv)

    chosen = set(args.workload or ["all"])
    names = [n for n in workloads.WORKLOADS if n in chosen or "all" in chosen]
    with_ceiling = "ceiling" in chosen or "all" in chosen
    adapter = get_adapter(args.adapter)
    results = Results()
    facts = db.machine_facts(args.dsn) | db.code_facts()

    if with_ceiling:
        ceiling.fresh(args.dsn)
    try:
        for rep in range(1, args.repeat + 1):
            for name in names:
                m = workloads.run(workloads.WORKLOADS[name], adapter, args.dsn,
                                  keep=args.keep and rep == args.repeat)
                results.add(m)
                print(f"[{rep}/{args.repeat}] {results.log_line(m)}", flush=True)
            if with_ceiling:
                for c in ceiling.CEILINGS.values():
                    m = ceiling.run(c, args.dsn, args.ceiling_seconds)
                    results.add(m)
                    print(f"[{rep}/{args.repeat}] {results.log_line(m)}", flush=True)
    finally:
        if with_ceiling:
            ceiling.drop(args.dsn)

    facts["load_average"] = f"{facts['load_average']} at start, {db.load_average()} at end"
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])
                                            if "://" not in a and "=" not in a)
    report = render(
        results, facts,
        {n: workloads.WORKLOADS[n].summary for n in names},
        {c.name: (c.summary, c.clients, c.bounds) for c in ceiling.CEILINGS.values()}
        if with_ceiling else {},
        command.strip(),
    )
    results.dump(HERE / ".out" / "results.json")
    if args.no_results:
        print(report)
    else:
        args.results.write_text(report + keep_runtime_section(args.results), encoding="utf-8")
        print(f"wrote {args.results}")
    return 0


def keep_runtime_section(path: Path) -> str:
    """The runtime section already in `path` (written by --runtime), to carry over."""
    from bench.report import RUNTIME_BEGIN, RUNTIME_END

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start, end = text.find(RUNTIME_BEGIN), text.find(RUNTIME_END)
    return "\n" + text[start:end + len(RUNTIME_END)] + "\n" if -1 < start < end else ""


def main_runtime(args: argparse.Namespace, names: list[str], argv: list[str] | None) -> int:
    from bench.report import dump_runtime, render_runtime, write_runtime_section

    systems = [runtime.SYSTEMS[n] for n in (args.system or runtime.SYSTEMS)]
    for system in systems:
        runtime.ensure_peer(system, upgrade=args.upgrade_peers)
    facts = db.machine_facts(args.dsn)
    runs = []
    for rep in range(1, args.repeat + 1):
        for name in names:
            for system in systems:
                m = runtime.run_one(system, runtime.RUNTIME_WORKLOADS[name], args.dsn)
                runs.append(m)
                vals = "  ".join(f"{k}={v:,.2f}" for k, v in m.values.items())
                print(f"[{rep}/{args.repeat}] {name:16} {system.name:14} {vals}", flush=True)
                dump_runtime(runs, HERE / ".out" / "runtime.json")
    facts["load_average"] = f"{facts['load_average']} at start, {db.load_average()} at end"
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])
                                            if "://" not in a and "=" not in a)
    section = render_runtime(runs, {n: runtime.RUNTIME_WORKLOADS[n].summary for n in names},
                             facts, command.strip())
    if args.no_results:
        print(section)
    else:
        write_runtime_section(args.results, section)
        print(f"wrote the runtime section of {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
