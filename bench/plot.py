"""The sustained-load plot: pickup latency, table + index size and dead tuples over
time, one line per system (bench/sustained.png)."""

from __future__ import annotations

from pathlib import Path

from bench.suite import Measurement
from bench.systems import SYSTEMS


def sustained_png(runs: list[Measurement], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    fig, (lat, size, dead) = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    for m in runs:
        label = SYSTEMS[m.system].label if m.system in SYSTEMS else m.system
        series = [b for b in m.values.get("series", []) if b.get("p99_ms") is not None]
        lat.plot([b["t"] for b in series], [b["p99_ms"] for b in series], label=label)
        samples = m.extra.get("samples", [])
        ts = [s["t"] for s in samples]
        size.plot(ts, [(s["table_bytes"] + s["index_bytes"]) / 2**20 for s in samples],
                  label=label)
        dead.plot(ts, [s["dead"] for s in samples], label=label)
    lat.set_ylabel("pickup p99 per 10 s (ms)")
    lat.set_yscale("log")
    size.set_ylabel("tables + indexes (MiB)")
    dead.set_ylabel("dead tuples")
    dead.set_xlabel("seconds since start")
    lat.legend(fontsize="small")
    lat.set_title("Sustained enqueue + drain (bench/RESULTS.md, Sustained load)")
    for ax in (lat, size, dead):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
