"""Where the sqljobs worker spends its time in drain_runtime (not part of the timed
suite). Runs the sqljobs driver's drain with the worker's calls counted (claim sizes,
ack batch sizes, round trips) and, with --cprofile FILE, under cProfile.

    python bench/runtime_drivers/sqljobs_profile.py --workload drain --dsn DSN --jobs 20000
"""

from __future__ import annotations

import atexit
import collections
import cProfile
import json
import os
import runpy
import sys
import time
from pathlib import Path

import sqljobs._client.queries as q

sizes: dict[str, list[int]] = collections.defaultdict(list)


def counted(name: str, size_of):  # type: ignore[no-untyped-def]
    original = getattr(q, name)

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        sizes[name].append(size_of(args, kwargs))
        return original(*args, **kwargs)

    setattr(q, name, wrapper)


counted("claim", lambda a, k: a[2] if len(a) > 2 else k.get("limit", 1))
counted("ack_many", lambda a, k: len(a[0]))
counted("heartbeat_many", lambda a, k: len(a[0]))
counted("worker_heartbeat", lambda a, k: 1)

from sqljobs._client.connection import AsyncClient  # noqa: E402

timings: dict[str, list[float]] = collections.defaultdict(list)
_run = AsyncClient.run


async def timed_run(self, call):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    try:
        return await _run(self, call)
    finally:
        what = call.sql.split(" from ")[1].split("(")[0] if " from " in call.sql else call.sql[:30]
        timings[what].append(time.perf_counter() - start)


AsyncClient.run = timed_run  # type: ignore[method-assign]
profile_to = os.environ.get("SQLJOBS_CPROFILE")
prof = cProfile.Profile() if profile_to else None


def report() -> None:
    if prof is not None and profile_to:
        prof.disable()
        prof.dump_stats(profile_to)
    out = {name: {"calls": len(v), "mean_size": sum(v) / len(v) if v else 0,
                  "sizes_hist": collections.Counter(v).most_common(8)}
           for name, v in sizes.items()}
    sys.stderr.write("CALLS " + json.dumps(out) + "\n")
    rt = {k: {"n": len(v), "mean_ms": 1000 * sum(v) / len(v), "total_s": sum(v)}
          for k, v in timings.items() if len(v) > 5}
    sys.stderr.write("ROUNDTRIPS " + json.dumps(rt) + "\n")


atexit.register(report)
if prof is not None:
    prof.enable()
sys.argv[0] = str(Path(__file__).with_name("sqljobs_driver.py"))
runpy.run_path(sys.argv[0], run_name="__main__")
