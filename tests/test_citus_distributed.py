"""sqljobs distributed on Citus: `sqljobs migrate --distributed` on a local cluster.

A coordinator and two worker nodes on this machine (tests/harness/citus.py); each test
takes a database of its own on every node. What must hold (docs/howto-citus.md,
"Distributed mode"; docs/design/citus.md):

- `sqljobs migrate --distributed` distributes job, step, event_wait and slot by bucket,
  co-located, with shards on the worker nodes, makes job_type, queue and limit reference
  tables, puts the engine's functions on every node and switches it to rounds per
  shard (the map of the shards' buckets is Citus's); run again, it changes nothing and
  keeps the jobs;
- it refuses, changing nothing, a database without Citus (SJ061) and live jobs made
  before schema version 3 (SJ062); finished ones get their bucket;
- the beside mode's guard, which every later revision runs first, leaves a distributed
  install's schema on the worker nodes;
- producer, worker and reader login roles do their work through the functions;
- a real `sqljobs worker` drains jobs spread over every shard, and finishes them all
  when a worker node is killed and restarted under it;
- pgTAP files pass on the distributed install (bench/citus_probe.py, whose map
  docs/design/citus.md prints).

Needs a PostgreSQL with Citus (as tests/test_citus.py; CI requires it).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sqljobs import CitusRequired, JobsBeforeBuckets
from sqljobs._client.errors import translate
from sqljobs._schema.citus import framed
from sqljobs._schema.distributed import distribute
from tests.harness.citus import LocalCluster, cluster_for_tests
from tests.processes import REPO, scalar, spawner, wait_for
from tests.worker_example_app import QUEUE, RUNS_TABLE

pytestmark = pytest.mark.slow

DISTRIBUTED = ("jobs.job", "jobs.step", "jobs.event_wait", "jobs.slot")
REFERENCE = ("jobs.job_type", "jobs.queue", "jobs.limit")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with cluster_for_tests() as made:
        yield made


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from sqljobs._cli import main; main()",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def _database(cluster: LocalCluster, name: str, *, distributed: bool = True) -> str:
    """A database `name` on every node with sqljobs installed on the coordinator, and
    distributed with the command a user runs, unless `distributed` is false."""
    cluster.create_database(name)
    dsn = cluster.nodes[0].dsn(name)
    out = _cli("migrate", *(["--distributed"] if distributed else []), "--dsn", dsn)
    assert out.returncode == 0, out.stdout + out.stderr
    return dsn


def _enqueue(conn: psycopg.Connection[Any], keys: range) -> None:
    conn.execute("select jobs.enqueue('example.echo', 'k' || g, jsonb_build_object('n', g), "
                 "jsonb_build_object('queue', %s::text)) from generate_series(%s::int, %s::int) g",
                 (QUEUE, keys.start, keys.stop - 1))


def _placement(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, str | None, int]]:
    """Each sqljobs table Citus knows: (method, distribution column, co-location group)."""
    rows = conn.execute("""
        select 'jobs.' || c.relname, p.partmethod::text,
               column_to_column_name(p.logicalrelid, p.partkey), p.colocationid
          from pg_dist_partition p join pg_class c on c.oid = p.logicalrelid
         where c.relnamespace = 'jobs'::regnamespace""").fetchall()
    return {name: (method, column, group) for name, method, column, group in rows}


def test_migrate_distributed_distributes_the_queue_and_runs_again_unchanged(
        cluster: LocalCluster) -> None:
    dsn = _database(cluster, "dist_install")
    with psycopg.connect(dsn, autocommit=True) as conn:
        placement = _placement(conn)
        assert {name: placement[name][:2] for name in DISTRIBUTED} == {
            name: ("h", "bucket") for name in DISTRIBUTED}
        assert len({placement[name][2] for name in DISTRIBUTED}) == 1  # co-located
        assert {name: placement[name][0] for name in REFERENCE} == {
            name: "n" for name in REFERENCE}
        assert set(placement) == set(DISTRIBUTED) | set(REFERENCE)  # the rest stays local
        worker_ports = {node.port for node in cluster.nodes[1:]}
        assert worker_ports <= {port for (port,) in conn.execute(
            "select distinct nodeport from citus_shards where table_name = 'jobs.job'::regclass")}
        assert scalar(conn, "select count(*) from citus_shards "
                            "where table_name = 'jobs.job'::regclass") == 32
        assert scalar(conn, "select jobs.distributed()") is True
        # the rounds' map: each bucket's shard holds exactly the buckets it names
        assert scalar(conn, """
            select count(*) from generate_series(0, 255) b
             where jobs.shard_buckets(b::smallint) is distinct from (
                   select array_agg(o::smallint order by o) from generate_series(0, 255) o
                    where get_shard_id_for_distribution_column('jobs.job', o::smallint)
                        = get_shard_id_for_distribution_column('jobs.job', b::smallint))""") == 0
        functions = scalar(conn, "select count(*) from pg_proc "
                                 "where pronamespace = 'jobs'::regnamespace")
        _enqueue(conn, range(1, 101))
    for node in cluster.nodes[1:]:
        with psycopg.connect(node.dsn("dist_install"), autocommit=True) as worker:
            assert scalar(worker, "select count(*) from pg_proc "
                                  "where pronamespace = 'jobs'::regnamespace") == functions

    again = _cli("migrate", "--distributed", "--shard-count", "8", "--dsn", dsn)
    assert again.returncode == 0, again.stdout + again.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _placement(conn) == placement
        assert scalar(conn, "select count(*) from citus_shards "
                            "where table_name = 'jobs.job'::regclass") == 32
        assert scalar(conn, "select count(*) from jobs.job") == 100
        # a plain migrate keeps it distributed (its guard, its refresh)
        out = _cli("migrate", "--dsn", dsn)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "distributed" in out.stdout
        assert scalar(conn, "select jobs.distributed()") is True


def test_the_sql_of_the_distributing_step_is_printed_for_review() -> None:
    out = _cli("migrate", "--distributed", "--shard-count", "64", "--sql")
    assert out.returncode == 0, out.stderr
    assert "set local sqljobs.shard_count = 64;" in out.stdout
    assert out.stdout.count("create_distributed_table(") == 4
    assert out.stdout.rstrip().endswith("commit;")


def test_migrate_distributed_without_citus_is_refused(cluster: LocalCluster) -> None:
    """A database of the coordinator's server without the extension: SJ061, and the
    schema as `sqljobs migrate` left it."""
    with psycopg.connect(cluster.nodes[0].dsn("postgres"), autocommit=True) as admin:
        admin.execute("create database dist_no_citus")
    dsn = cluster.nodes[0].dsn("dist_no_citus")
    out = _cli("migrate", "--distributed", "--dsn", dsn)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "citus_required" in out.stderr and "create extension citus" in out.stderr
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as error:
        distribute(conn)
    assert isinstance(translate(error.value), CitusRequired)


def test_live_jobs_from_before_version_3_stop_it_and_finished_ones_get_their_bucket(
        cluster: LocalCluster) -> None:
    dsn = _database(cluster, "dist_old_jobs", distributed=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _enqueue(conn, range(1, 4))
        # as revision 3's upgrade leaves the jobs made before it: no bucket
        conn.execute("update jobs.job set bucket = null")
        out = _cli("migrate", "--distributed", "--dsn", dsn)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "jobs_before_buckets" in out.stderr and "3 live jobs" in out.stderr
        with pytest.raises(psycopg.Error) as error:
            distribute(conn)
        assert isinstance(translate(error.value), JobsBeforeBuckets)
        assert _placement(conn) == {}
        assert scalar(conn, "select count(*) from jobs.job where bucket is null") == 3

        conn.execute("update jobs.job set state = 'cancelled' where key = 'k1'")
        conn.execute("update jobs.job set state = 'succeeded' where key <> 'k1'")
        out = _cli("migrate", "--distributed", "--dsn", dsn)
        assert out.returncode == 0, out.stdout + out.stderr
        assert scalar(conn, "select count(*) from jobs.job where bucket = id & 255") == 3
        assert _placement(conn)["jobs.job"][:2] == ("h", "bucket")


def test_the_guard_of_a_later_revision_leaves_a_distributed_install_in_place(
        cluster: LocalCluster) -> None:
    """Every revision runs the beside mode's guard first, which removes the jobs schema
    from the worker nodes of a coordinator install; distributed, that schema holds the
    shards."""
    dsn = _database(cluster, "dist_guard")
    with psycopg.connect(dsn, autocommit=True) as conn:
        _enqueue(conn, range(1, 51))
        with conn.transaction():
            conn.execute(framed("select 1;").encode())
        assert scalar(conn, "select count(*) from jobs.job") == 50
        assert scalar(conn, "show citus.enable_ddl_propagation") == "on"
    for node in cluster.nodes[1:]:
        with psycopg.connect(node.dsn("dist_guard"), autocommit=True) as worker:
            assert scalar(worker, "select to_regnamespace('jobs') is not null")


def test_the_sqljobs_roles_work_distributed_through_the_functions(
        cluster: LocalCluster) -> None:
    """Login roles granted the sqljobs roles, made on the coordinator after distributing
    (Citus propagates them): a producer enqueues, a worker claims and acks across
    shards, a reader lists jobs through jobs.list_jobs. The engine's functions run as
    their owner, so their shard connections are the owner's; a reader's direct read of
    jobs.job_view goes to the shards as the reader, who may not read them: refused,
    as docs/howto-citus.md says."""
    dsn = _database(cluster, "dist_roles")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create role dist_producer login; grant sqljobs_producer to dist_producer;"
                     "create role dist_worker login; grant sqljobs_worker to dist_worker;"
                     "create role dist_reader login; grant sqljobs_reader to dist_reader")

    def login(role: str) -> psycopg.Connection[Any]:
        return psycopg.connect(dsn.replace("postgres@", f"{role}@"), autocommit=True)

    with login("dist_producer") as producer:
        _enqueue(producer, range(1, 41))
    with login("dist_worker") as worker:
        claimed = worker.execute("select id, claim from jobs.claim_v2(%s, 'w', 40, 30)",
                                 ([QUEUE],)).fetchall()
        assert len(claimed) == 40
        acked = worker.execute("select ok from jobs.ack_many(%s, %s, null)",
                               ([r[0] for r in claimed], [r[1] for r in claimed])).fetchall()
        assert [ok for (ok,) in acked] == [True] * 40
    with login("dist_reader") as reader:
        assert scalar(reader, "select count(*) from jobs.list_jobs('{\"state\": \"succeeded\"}',"
                              " null, 100)") == 40
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("select count(*) from jobs.job_view")


def test_a_worker_drains_every_shard_and_finishes_when_a_node_is_killed_under_it(
        cluster: LocalCluster, tmp_path: Path) -> None:
    """200 quick jobs and 20 that run 5 s, over every shard; a worker node is killed
    (immediate stop) while the worker runs jobs whose rows are on it, and started again
    once one of them has finished its handler (its ack then meets the dead node): every
    job succeeds, none is lost, and the worker process goes on."""
    dsn = _database(cluster, "dist_worker")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RUNS_TABLE)
        _enqueue(conn, range(1, 201))
        conn.execute("select jobs.enqueue('example.slow', 's' || g, '{\"seconds\": 5}', "
                     "jsonb_build_object('queue', %s::text)) from generate_series(1, 20) g",
                     (QUEUE,))
        assert scalar(conn, "select count(distinct s.nodeport) from jobs.job j "
                            "join citus_shards s on s.shardid = "
                            "get_shard_id_for_distribution_column('jobs.job', j.bucket)"
                            ) == len(cluster.workers)
        on_node_1 = """select array_agg(j.id) from jobs.job j
                         join citus_shards s on s.shardid =
                              get_shard_id_for_distribution_column('jobs.job', j.bucket)
                        where s.nodeport = %s and j.name = 'example.slow'
                          and j.state = 'running'"""
        with spawner(dsn, tmp_path, "worker") as start:
            worker = start("tests.worker_example_app:app", "--queue", QUEUE,
                           "--concurrency", "20", "--lease", "10")
            running = wait_for(lambda: scalar(conn, on_node_1, (cluster.nodes[1].port,)),
                               "the worker to run slow jobs of the first worker node",
                               timeout=180)
            assert "ERROR" not in worker.output(), worker.output()  # its polls run distributed
            cluster.stop_node(1)  # immediate: as a crash
            try:
                wait_for(lambda: scalar(conn, "select count(*) > 0 from public.worker_runs "
                                              "where event = 'end' and job_id = any(%s)",
                                        (running,)),
                         "a handler of a job on the killed node to finish", timeout=120)
            finally:
                cluster.start_node(1)
            wait_for(lambda: scalar(conn, "select count(*) = 220 from jobs.job "
                                          "where state = 'succeeded'"),
                     "the worker to finish all 220 jobs", timeout=300)
            assert worker.proc.poll() is None, worker.output()
        assert scalar(conn, "select count(*) from jobs.job") == 220
        assert scalar(conn, "select count(*) from jobs.job where name = 'example.echo' "
                            "and (result->>'n')::int = (payload->>'n')::int") == 200


def test_pgtap_files_pass_distributed(cluster: LocalCluster) -> None:
    """bench/citus_probe.py distributes a fresh install as `sqljobs migrate --distributed`
    does and runs pgTAP files there. Kept here so its map (docs/design/citus.md, "What the
    probe finds") stays true: the surface, the files that pin what distributing needs,
    claims, acks, nacks, lease recovery, cancels, requeues, the verbs by filter,
    limits, event waits, child jobs, sagas' unwinds, job details, ledgers, purge, the
    workers' registry and hooks pass distributed; a file whose sessions read the views
    as a role that cannot log in on the worker nodes does not: the day it passes, the
    page's map is out of date."""
    from bench.citus_probe import probe

    passing = ["test_surface.sql", "test_distributable.sql", "test_limits_surface.sql",
               "test_claim_names.sql", "test_claim_lease_recovery_history.sql",
               "test_ack.sql", "test_nack_modes.sql", "test_cancel.sql",
               "test_cancel_where.sql", "test_where_filters.sql",
               "test_limits_concurrency.sql", "test_limits_rate.sql",
               "test_slot_release_paths.sql", "test_saga_unwind.sql", "test_claim_version.sql",
               "test_event_wait_timeout.sql", "test_child_invoke.sql", "test_requeue.sql",
               "test_job_detail_attempts.sql", "test_ledger.sql", "test_purge_policy.sql",
               "test_workers_registry.sql", "test_hooks.sql"]
    assert probe(cluster, passing) == len(passing)
    assert probe(cluster, ["test_roles.sql"]) == 0
