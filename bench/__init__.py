"""sqljobs benchmarks: `python -m bench` (`make bench`) writes bench/RESULTS.md; the
method is in docs/benchmarks.md.

Layout:
  __main__.py           the command: parts side_by_side, sustained, engine
  systems.py            the systems under test; peers installed into bench/.peers/
  runtime_drivers/      one driver per system, run with that system's interpreter,
                        through its public API (_common.py: the shared protocol)
  suite.py              runs drivers in fresh databases; the sustained sampler
  wire.py               the counting proxy: round trips and transactions per job
  autovacuum.py         stands in for autovacuum on a server that runs without it
  report_suite.py       the side-by-side and sustained sections; plot.py the PNG
  workloads.py          the engine workloads at SQL level, driving an adapter
  adapters/             sqljobs at SQL level (sqljobs_sql.py)
  ceiling.py, pgbench/  the pgbench ceilings on a minimal queue table
  db.py                 fresh databases, commit counters, server facts
  report.py             medians and ranges, the engine section, RESULTS.md's sections
  peers.py              the targets (docs/benchmarks.md) for the engine section
  sustained.py          the finished-jobs study (docs/design/finished-jobs.md)
  relay.py, cycle.py    the outbox relay's throughput; claim/ack folding at SQL level
"""
