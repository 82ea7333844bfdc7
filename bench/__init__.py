"""sqljobs benchmarks: `python -m bench` (workloads and pgbench ceilings), and
`python -m bench.sustained` (where finished jobs live, under sustained load).

Layout:
  workloads.py          every workload, defined once, driving an adapter
  adapters/             one adapter per system under test (sqljobs_sql.py today)
  ceiling.py, pgbench/  the pgbench ceilings on a minimal queue table
  db.py                 fresh databases, commit counters, server facts
  report.py             collecting repeats, medians and ranges, writing RESULTS.md
  peers.py              peer figures quoted from ANCHORS.md (not measured here)
  sustained.py          the finished-jobs measurement (docs/design/finished-jobs.md)
  runtime.py            runtime workloads (`--runtime`): each system's own worker and
                        handlers; peers installed into bench/.peers/<name>/venv
  runtime_drivers/      one driver script per system, run with that system's python
  cycle.py              one worker's claim/ack cycle at SQL level: serial vs folded
"""
