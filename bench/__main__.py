"""python -m bench: the benchmark suite; writes bench/RESULTS.md.

    python -m bench                                   # everything (make bench)
    python -m bench --part side_by_side               # one part: side_by_side,
                                                      #   sustained or engine
    python -m bench --part side_by_side --system sqljobs --system graphile \\
                    --workload drain --repeat 5       # some systems and workloads
    python -m bench --part sustained --sustained-seconds 120
    python -m bench --part pressure --pressure-profile short   # one cell well under a
                                                      #   minute (make bench-pressure: long)

Parts (each rewrites only its own section of RESULTS.md):
  side_by_side  every system's driver through enqueue_single, enqueue_bulk, drain,
                latency and steps (step + replay); systems interleaved in every
                repeat, then one counted run each through the wire proxy
  sustained     each queue system for --sustained-seconds at --sustained-rate jobs/s,
                its database sampled every 10 s; draws bench/sustained.png
  engine        sqljobs alone at the SQL level (the jobs.* functions over psycopg),
                interleaved with the pgbench ceilings of this machine
  study         the engine hot-path study: jobs.* and the prototype storage shapes of
                bench/adapters/shapes.sql through the engine workloads, interleaved
                (docs/design/engine-hot-path.md); not part of a run without --part
  pressure      the sustained load for each queue system in four cells: as_is, snapshot
                (a REPEATABLE READ snapshot held idle in transaction), reader (full
                scans of the job table beside it), burst (10x the rate for a while);
                per 10 s pickup p50/p99, completions, dead tuples, sizes; draws
                bench/pressure.png. Run only when asked for (--part pressure): the long
                profile takes 3 minutes per system and cell

A peer that cannot be installed here is skipped, and the section says why.

Peers are installed on first use into bench/.peers/ (latest releases; --upgrade-peers
to refresh). Databases are created next to the admin DSN (--dsn, else
$SQLJOBS_BENCH_DSN, else the local postgres database) and dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import ceiling, db, pressure, study, suite, workloads
from bench.adapters import get_adapter
from bench.report import Results, render, render_header, write_results
from bench.systems import SYSTEMS
from bench.wire import WireCounter

HERE = Path(__file__).resolve().parent
OUT = HERE / ".out"
PARTS = ("side_by_side", "sustained", "engine", "pressure", "study")
DEFAULT_PARTS = ["side_by_side", "sustained", "engine"]  # pressure, study: when asked for
ENGINE_CHOICES = [*workloads.WORKLOADS, "ceiling"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", action="append", choices=PARTS,
                        help="run only this part (repeatable; default all)")
    parser.add_argument("--system", action="append", choices=list(SYSTEMS),
                        help="side_by_side / sustained: only these systems (repeatable)")
    parser.add_argument("--workload", action="append",
                        choices=sorted({*suite.WORKLOADS, *ENGINE_CHOICES}),
                        help="only these workloads of the parts run (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats (default 3)")
    parser.add_argument("--no-count", action="store_true",
                        help="side_by_side: skip the counted run through the wire proxy")
    parser.add_argument("--sustained-seconds", type=float, default=600.0,
                        help="sustained: seconds per system (default 600)")
    parser.add_argument("--sustained-rate", type=float, default=200.0,
                        help="sustained: jobs/s enqueued (default 200)")
    parser.add_argument("--pressure-profile", choices=list(pressure.PROFILES), default="long",
                        help="pressure: long (3 min per cell at 400 jobs/s, the default) or "
                             "short (30 s at 100 jobs/s)")
    parser.add_argument("--cell", action="append", choices=list(pressure.CELLS),
                        help="pressure: only these cells (repeatable; as_is always runs "
                             "first when another is asked for, as their baseline)")
    parser.add_argument("--pressure-seconds", type=float, default=None,
                        help="pressure: override the profile's seconds of offered load")
    parser.add_argument("--pressure-rate", type=float, default=None,
                        help="pressure: override the profile's jobs/s")
    parser.add_argument("--pressure-window", type=float, default=None,
                        help="pressure: override the profile's window (10 s)")
    parser.add_argument("--ceiling-seconds", type=int, default=10,
                        help="engine: pgbench -T for each ceiling (default 10)")
    parser.add_argument("--dsn", default=db.admin_dsn_from_env(),
                        help="admin DSN (default $SQLJOBS_BENCH_DSN or the local server)")
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md",
                        help="the report to update (default bench/RESULTS.md)")
    parser.add_argument("--no-results", action="store_true",
                        help="print only (plots go to bench/.out/)")
    parser.add_argument("--upgrade-peers", action="store_true",
                        help="reinstall every peer's latest release first")
    args = parser.parse_args(argv)
    command = "python -m bench " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
        if "://" not in a and "=" not in a)
    # "ceiling" belongs to the engine part alone: asking for it (without --part) means
    # the engine workloads, as the suite's SQL-level runs always have.
    parts = args.part or (["engine"] if "ceiling" in (args.workload or []) else DEFAULT_PARTS)
    sections: dict[str, str] = {}
    facts = db.machine_facts(args.dsn) | db.code_facts() | {"node": _node_version()}

    if "side_by_side" in parts:
        sections["side_by_side"] = side_by_side(args, command.strip())
    if "sustained" in parts:
        sections["sustained"] = sustained(args, command.strip())
    if "engine" in parts:
        sections["engine"] = engine(args, command.strip(), facts)
    if "pressure" in parts:
        sections["pressure"] = pressure_part(args, command.strip())
    if "study" in parts:
        per_shape, ceilings = study.run(args.dsn, args.repeat, args.workload,
                                        args.ceiling_seconds)
        sections["study"] = study.render(per_shape, ceilings, command.strip(), facts)

    if args.no_results:
        print("\n\n".join(sections.values()))
    else:
        write_results(args.results, render_header(facts), sections)
        print(f"wrote {', '.join(sections)} in {args.results}")
    return 0


def _node_version() -> str:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not found"


def _meta(command: str, load_start: str, **more: Any) -> dict[str, Any]:
    return {"command": command, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_start": load_start, "load_end": db.load_average(), **more}


def _systems(args: argparse.Namespace, workload_names: list[str],
             skipped: dict[str, str] | None = None) -> list[Any]:
    """The chosen systems that run any of these workloads, installed. A peer that cannot
    be installed here is left out, its reason in `skipped` (and printed)."""
    chosen = [SYSTEMS[n] for n in (args.system or SYSTEMS)]
    systems = []
    for s in (s for s in chosen if s.workloads & set(workload_names)):
        try:
            s.install(upgrade=args.upgrade_peers)
        except (OSError, subprocess.CalledProcessError) as e:
            reason = f"could not be installed here ({type(e).__name__}: {e})"
            print(f"[skip] {s.name}: {reason}", flush=True)
            if skipped is not None:
                skipped[s.name] = reason
            continue
        systems.append(s)
    return systems


def _not_measured(skipped: dict[str, str]) -> str:
    if not skipped:
        return ""
    return "Not measured:\n\n" + "\n".join(
        f"- {name}: skipped, {reason}" for name, reason in skipped.items()) + "\n"


def _merged(path: Path, runs: list[suite.Measurement], meta: dict[str, Any],
            args: argparse.Namespace) -> tuple[list[suite.Measurement], dict[str, Any]]:
    """With --system or --workload, keep the earlier runs (bench/.out/) of what was not
    rerun now, so a section can be completed in steps; its header lists every command."""
    from bench.report_suite import load

    if not (args.system or args.workload) or not path.exists():
        return runs, meta
    old_meta, old_runs = load(path)
    if old_meta.get("seconds", meta.get("seconds")) != meta.get("seconds") or \
            old_meta.get("repeats", meta.get("repeats")) != meta.get("repeats"):
        return runs, meta  # not comparable: start the section afresh
    redone = {(m.workload, m.system) for m in runs}
    kept = [m for m in old_runs if (m.workload, m.system) not in redone]
    if not kept:  # all redone: the header names this command alone
        return runs, meta
    merged = {**meta, "command": f"{old_meta['command']}`, then `{meta['command']}",
              "date": f"{old_meta['date']} to {meta['date']}",
              "load_start": old_meta["load_start"]}
    return kept + runs, merged


def side_by_side(args: argparse.Namespace, command: str) -> str:
    from bench.report_suite import dump, render_every_run, render_side_by_side

    names = [n for n in suite.WORKLOADS if not args.workload or n in args.workload]
    skipped: dict[str, str] = {}
    systems = _systems(args, names, skipped)
    load_start = db.load_average()
    runs: list[suite.Measurement] = []

    def log(m: suite.Measurement) -> None:
        vals = "  ".join(f"{k}={v:,.2f}" for k, v in m.values.items()
                         if isinstance(v, (int, float)))
        counted = (f"  round_trips={m.round_trips} transactions={m.transactions}"
                   if m.round_trips is not None else "")
        print(f"[{m.repeat or 'count'}/{args.repeat}] {m.workload:15} {m.system:17} "
              f"{vals}{counted}", flush=True)

    for rep in range(1, args.repeat + 1):
        for name in names:
            for system in systems:
                if name in system.workloads:
                    for m in suite.measure(system, suite.WORKLOADS[name], args.dsn, rep):
                        runs.append(m)
                        log(m)
                    # what a crash would otherwise lose (rename it side_by_side.json)
                    dump(runs, _meta(command, load_start, repeats=args.repeat),
                         OUT / "side_by_side.partial.json")
    if not args.no_count:
        with WireCounter(*suite.upstream(args.dsn)) as counter:
            for name in names:
                for system in systems:
                    if name in system.workloads:
                        for m in suite.measure(system, suite.WORKLOADS[name], args.dsn, 0,
                                               counter):
                            runs.append(m)
                            log(m)
    meta = _meta(command, load_start, repeats=args.repeat)
    if not args.no_results:  # a run not written to the results is not merged into them
        runs, meta = _merged(OUT / "side_by_side.json", runs, meta, args)
        dump(runs, meta, OUT / "side_by_side.json")
    return (render_side_by_side(runs, meta) + "\n" + _not_measured(skipped) + "\n"
            + render_every_run(runs))


def _plot_path(args: argparse.Namespace, name: str) -> Path:
    """Where a part draws its plot: beside the results file it belongs to, or, for a
    run not written to the results (--no-results), in the scratch directory, so that
    it neither passes for the recorded run's plot nor removes it."""
    return (OUT if args.no_results else args.results.parent) / name


def sustained(args: argparse.Namespace, command: str) -> str:
    from bench.plot import sustained_png
    from bench.report_suite import dump, render_sustained

    skipped: dict[str, str] = {}
    systems = _systems(args, ["sustained"], skipped)
    load_start = db.load_average()
    runs = []
    for system in systems:
        m = suite.sustained(system, args.dsn, args.sustained_seconds, args.sustained_rate)
        runs.append(m)
        dump(runs, _meta(command, load_start, rate=args.sustained_rate,
                         seconds=args.sustained_seconds), OUT / "sustained.partial.json")
        print(f"[sustained] {system.name:17} p50={m.values['p50_ms']:.1f} ms "
              f"p99={m.values['p99_ms']:.1f} ms samples={len(m.extra['samples'])}",
              flush=True)
    meta = _meta(command, load_start, rate=args.sustained_rate,
                 seconds=args.sustained_seconds)
    if not args.no_results:
        runs, meta = _merged(OUT / "sustained.json", runs, meta, args)
        dump(runs, meta, OUT / "sustained.json")
    plot = _plot_path(args, "sustained.png")
    sustained_png(runs, plot)
    return render_sustained(runs, meta, plot.name) + "\n" + _not_measured(skipped)


def pressure_part(args: argparse.Namespace, command: str) -> str:
    """Every cell (as_is first: the others are read against it), the systems one
    after another within each cell. A cell that fails for a system is reported, not
    fatal."""
    from dataclasses import asdict, replace

    from bench.report_pressure import pressure_png, render_pressure
    from bench.report_suite import dump

    profile = pressure.PROFILES[args.pressure_profile]
    overrides = {k: v for k, v in (("seconds", args.pressure_seconds),
                                   ("rate", args.pressure_rate),
                                   ("window", args.pressure_window)) if v is not None}
    if "seconds" in overrides:  # the burst keeps its place in the run: a third in,
        scale = overrides["seconds"] / profile.seconds  # a sixth of it long
        overrides |= {"burst_at": profile.burst_at * scale,
                      "burst_seconds": profile.burst_seconds * scale}
    if overrides:
        profile = replace(profile, **overrides)
    cells = [c for c in pressure.CELLS if not args.cell or c in args.cell or c == "as_is"]
    skipped: dict[str, str] = {}
    systems = _systems(args, ["pressure"], skipped)
    load_start = db.load_average()
    runs: list[suite.Measurement] = []
    failed: dict[str, str] = {}

    def meta() -> dict[str, Any]:
        return _meta(command, load_start, profile=asdict(profile), cells=cells,
                     skipped=skipped, failed=failed,
                     note=(f"A short run ({profile.name} profile, {profile.seconds:g} s per "
                           f"cell at {profile.rate:g} jobs/s) on a machine of "
                           f"{os.cpu_count()} cores shared with other work (see the load "
                           "averages): it shows that the cells run and what they record, "
                           "not how the systems compare. The long profile is "
                           "`make bench-pressure`."
                           if profile != pressure.PROFILES["long"] else ""))

    for cell in cells:
        for system in systems:
            try:
                m = pressure.run_cell(system, cell, args.dsn, profile)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                failed[f"{system.name} / {cell}"] = f"{type(e).__name__}: {str(e)[-600:]}"
                print(f"[pressure] {cell:8} {system.name:17} FAILED: {str(e)[-300:]}",
                      flush=True)
                continue
            runs.append(m)
            dump(runs, meta(), OUT / "pressure.partial.json")
            worst = max((w["p99_ms"] for w in m.extra["windows"] if w["p99_ms"] is not None),
                        default=0.0)
            dead = max((w["dead"] or 0 for w in m.extra["windows"]), default=0)
            print(f"[pressure] {cell:8} {system.name:17} p50={m.values['p50_ms']:.1f} ms "
                  f"p99={m.values['p99_ms']:.1f} ms worst-window-p99={worst:.1f} ms "
                  f"most-dead={dead:,.0f} windows={len(m.extra['windows'])}"
                  + (f" ERRORS: {m.extra['errors']}" if m.extra["errors"] else ""),
                  flush=True)
    dump(runs, meta(), OUT / "pressure.json")
    plot = _plot_path(args, "pressure.png")
    drawn = bool(runs) and pressure_png(runs, plot)
    if not drawn:  # an earlier run's plot would pass for this one's
        plot.unlink(missing_ok=True)
    return render_pressure(runs, meta(), plot.name if drawn else None)


def engine(args: argparse.Namespace, command: str, facts: dict[str, str]) -> str:
    chosen = set(args.workload or ENGINE_CHOICES)
    names = [n for n in workloads.WORKLOADS if n in chosen]
    with_ceiling = "ceiling" in chosen or not args.workload
    adapter = get_adapter("sqljobs")
    results = Results()
    load_start = db.load_average()
    if with_ceiling:
        ceiling.fresh(args.dsn)
    try:
        for rep in range(1, args.repeat + 1):
            for name in names:
                m = workloads.run(workloads.WORKLOADS[name], adapter, args.dsn)
                results.add(m)
                print(f"[{rep}/{args.repeat}] engine {results.log_line(m)}", flush=True)
            if with_ceiling:
                for c in ceiling.CEILINGS.values():
                    m = ceiling.run(c, args.dsn, args.ceiling_seconds)
                    results.add(m)
                    print(f"[{rep}/{args.repeat}] {results.log_line(m)}", flush=True)
    finally:
        if with_ceiling:
            ceiling.drop(args.dsn)
    results.dump(OUT / "engine.json")
    facts = facts | {"load_average": f"{load_start} at start, {db.load_average()} at end"}
    return render(
        results, facts, {n: workloads.WORKLOADS[n].summary for n in names},
        {c.name: (c.summary, c.clients, c.bounds) for c in ceiling.CEILINGS.values()}
        if with_ceiling else {},
        command)


if __name__ == "__main__":
    sys.exit(main())
