"""sqljobs beside a distributed application: on the coordinator of a local Citus cluster.

A coordinator and two worker nodes on this machine (tests/harness/citus.py), one
database `sqljobs` on each. sqljobs is installed on the coordinator with `sqljobs
migrate` and its tables stay local there; the application's tables are distributed.
What must hold (docs/howto-citus.md):

- the install puts nothing on the worker nodes (no schema, no functions, nothing in
  Citus's record of distributed objects), a migrate aimed at a worker node is refused
  with SJ060, naming the coordinator, and a client aimed at one stops at its schema check;
- an install made before the guard (its functions copied to the worker nodes) loses
  those copies at its next upgrade, and the application's own DDL that follows a
  revision in one transaction still reaches the shards;
- an enqueue commits and rolls back with a distributed write in one transaction,
  including a write that spans every shard and one that fails on a stopped node;
- a real `sqljobs worker` drains jobs enqueued that way, and goes on while a worker
  node is down;
- every pgTAP file of sqltests/ passes on the coordinator.

Needs a PostgreSQL with Citus on this machine (`.ci/run` builds it from the vendored
source and sets SQLJOBS_REQUIRE_CITUS=1, so CI fails rather than skips without it).
The cluster takes about 10 s to start.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_pgtap.pgtap import Runner
from pytest_pgtap.plugin.core import report_tap

from sqljobs import App, SchemaError
from sqljobs._schema import migrate
from sqljobs._schema.citus import framed
from sqljobs._schema.resources import revision, revisions
from tests.harness.citus import LocalCluster, cluster_for_tests
from tests.harness.pgtap import ensure_pgtap
from tests.processes import REPO, scalar, spawner, wait_for
from tests.worker_example_app import QUEUE

pytestmark = pytest.mark.slow

SQLTESTS = Path(__file__).resolve().parent.parent / "sqltests"
PGTAP_FILES = sorted(path.name for path in SQLTESTS.glob("test_*.sql"))

ORDERS = """
create table app_orders (id bigint primary key, total numeric not null);
select create_distributed_table('app_orders', 'id');
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with cluster_for_tests() as made:
        out = _cli("migrate", "--dsn", made.coordinator)
        assert out.returncode == 0, out.stdout + out.stderr
        with psycopg.connect(made.coordinator, autocommit=True) as conn:
            conn.execute(ORDERS)
        yield made


@pytest.fixture
def coordinator(cluster: LocalCluster) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(cluster.coordinator, autocommit=True) as conn:
        yield conn
        conn.execute("truncate app_orders")
        conn.execute("delete from jobs.job")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from sqljobs._cli import main; main()",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def _jobs_schema_on(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return bool(scalar(conn, "select to_regnamespace('jobs') is not null"))


def _distributed_jobs_objects(conn: psycopg.Connection[Any]) -> int:
    return int(scalar(conn, """
        select count(*) from pg_catalog.pg_dist_object o
         where (o.classid = 'pg_namespace'::regclass and o.objid = to_regnamespace('jobs'))
            or (o.classid = 'pg_proc'::regclass
                and o.objid in (select oid from pg_proc
                                 where pronamespace = to_regnamespace('jobs')))"""))


# -- the install ---------------------------------------------------------------------------

def test_the_install_stays_on_the_coordinator(cluster: LocalCluster,
                                              coordinator: psycopg.Connection[Any]) -> None:
    assert scalar(coordinator, "select jobs.schema_version()") == len(revisions())
    assert scalar(coordinator, "select citus_table_type from citus_tables "
                               "where table_name = 'app_orders'::regclass") == "distributed"
    assert scalar(coordinator, "select count(*) from citus_tables "
                               "where table_name::text ^@ 'jobs.'") == 0
    assert _distributed_jobs_objects(coordinator) == 0
    for worker in cluster.workers:
        assert not _jobs_schema_on(worker), f"the jobs schema was copied to {worker}"


def test_a_producer_login_enqueues_beside_a_distributed_write(
        coordinator: psycopg.Connection[Any], cluster: LocalCluster) -> None:
    """The application's login, granted sqljobs_producer on the coordinator (where the
    roles live) and its table's privileges, enqueues in its own transaction."""
    coordinator.execute("drop role if exists app_login")
    coordinator.execute("create role app_login login")
    coordinator.execute("grant sqljobs_producer to app_login")
    coordinator.execute("grant insert, select on app_orders to app_login")
    login = cluster.nodes[0].dsn().replace("postgres@", "app_login@")
    with psycopg.connect(login) as app_conn:  # one transaction, committed on exit
        _order_and_job(app_conn, 7, jobs_first=False)
    assert scalar(coordinator, "select count(*) from jobs.job where key = 'order-7'") == 1
    assert scalar(coordinator, "select count(*) from app_orders where id = 7") == 1


def test_migrate_on_a_worker_node_is_refused_naming_the_coordinator(
        cluster: LocalCluster) -> None:
    out = _cli("migrate", "--dsn", cluster.workers[0])
    assert out.returncode == 1, out.stdout + out.stderr
    coordinator_port = cluster.nodes[0].port
    assert "SJ060 citus_worker_node" in out.stderr
    assert f"127.0.0.1:{coordinator_port}" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert not _jobs_schema_on(cluster.workers[0])


def test_sqljobs_on_a_worker_node_is_refused_before_anything_runs(
        cluster: LocalCluster) -> None:
    """A client pointed at a worker node stops at its schema check, which names the
    coordinator; a plain SQL call finds no schema."""
    app = App(cluster.workers[1])
    coordinator = f"127.0.0.1:{cluster.nodes[0].port}"
    with pytest.raises(SchemaError, match=f"Citus worker node.*coordinator \\({coordinator}\\)"):
        app.open()
    with psycopg.connect(cluster.workers[1], autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InvalidSchemaName, match='schema "jobs"'):
        conn.execute("select jobs.enqueue('example.echo', 'k', '{}')")


def test_an_install_made_before_the_guard_loses_its_copies_on_the_workers(
        cluster: LocalCluster) -> None:
    """Revisions 1 and 2 applied as sqljobs 0.2 did (no guard): Citus copies every
    function to the worker nodes, where calls fail. The upgrade to the next version runs
    the guard, which removes the copies and Citus's record of them."""
    database = "sqljobs_before_guard"
    cluster.create_database(database)
    coordinator = cluster.nodes[0].dsn(database)
    with psycopg.connect(coordinator, autocommit=True) as conn:
        roles = [row[0] for row in conn.execute(
            "select rolname from pg_roles where rolname ^@ 'sqljobs_'")]
        for worker in cluster.workers:  # the roles as 0.2 left them: on every node
            with psycopg.connect(worker, autocommit=True) as node:
                node.execute("set citus.enable_ddl_propagation to off")
                for role in roles:
                    if not scalar(node, "select to_regrole(%s) is not null", (role,)):
                        node.execute(f"create role {role} nologin")  # type: ignore[arg-type]
        with conn.transaction():
            for version in (1, 2):
                conn.execute(revision(version).sql())  # type: ignore[arg-type]
        conn.execute("create table sqljobs_alembic_version (version_num varchar(32) "
                     "primary key); insert into sqljobs_alembic_version values "
                     "('sqljobs_0002')")
        assert _distributed_jobs_objects(conn) > 0
    workers = [node.dsn(database) for node in cluster.nodes[1:]]
    assert all(_jobs_schema_on(worker) for worker in workers), "the old install's copies"

    migrate.upgrade(coordinator)

    with psycopg.connect(coordinator, autocommit=True) as conn:
        assert scalar(conn, "select jobs.schema_version()") == len(revisions())
        assert _distributed_jobs_objects(conn) == 0
    assert not any(_jobs_schema_on(worker) for worker in workers)


def test_an_upgrade_leaves_the_applications_own_ddl_propagating(
        coordinator: psycopg.Connection[Any]) -> None:
    """Alembic runs a whole upgrade in one transaction: a host application's revision
    that follows sqljobs' there must still reach every shard."""
    with coordinator.transaction():
        coordinator.execute(framed("select 1;"))  # a revision's frame around an empty body
        assert scalar(coordinator, "show citus.enable_ddl_propagation") == "on"
        coordinator.execute("alter table app_orders add column note text")
    try:  # each shard has the column: reading it from every shard succeeds
        coordinator.execute("insert into app_orders select g, 1 from generate_series(1, 64) g")
        assert scalar(coordinator, "select count(note) from app_orders") == 0
    finally:
        coordinator.execute("alter table app_orders drop column note")


# -- the atomic enqueue --------------------------------------------------------------------

def _order_and_job(conn: psycopg.Connection[Any], order: int, *, jobs_first: bool) -> None:
    enqueue = ("select jobs.enqueue('example.echo', %s, jsonb_build_object('n', %s::int), "
               "jsonb_build_object('queue', %s::text))", (f"order-{order}", order, QUEUE))
    write = ("insert into app_orders (id, total) values (%s, 10)", (order,))
    for statement, params in ((enqueue, write) if jobs_first else (write, enqueue)):
        conn.execute(statement, params)  # type: ignore[arg-type]


@pytest.mark.parametrize("jobs_first", [False, True], ids=["write-then-enqueue",
                                                            "enqueue-then-write"])
def test_an_enqueue_commits_and_rolls_back_with_a_distributed_write(
        coordinator: psycopg.Connection[Any], jobs_first: bool) -> None:
    with coordinator.transaction():
        _order_and_job(coordinator, 1, jobs_first=jobs_first)
    with pytest.raises(psycopg.errors.RaiseException), coordinator.transaction():
        _order_and_job(coordinator, 2, jobs_first=jobs_first)
        coordinator.execute("do $$ begin raise exception 'the app gives up'; end $$")
    assert scalar(coordinator, "select array_agg(id order by id) from app_orders") == [1]
    assert scalar(coordinator, "select array_agg(key order by key) from jobs.job") == [
        "order-1"]


def test_an_enqueue_commits_with_a_write_across_every_shard(
        coordinator: psycopg.Connection[Any], cluster: LocalCluster) -> None:
    """A multi-shard write commits on every worker node by two-phase commit, the job on
    the coordinator in the same transaction."""
    with coordinator.transaction():
        coordinator.execute("insert into app_orders select g, 1 from generate_series(1, 64) g")
        coordinator.execute("select jobs.enqueue('example.echo', 'batch', '{\"n\": 64}', "
                            "jsonb_build_object('queue', %s::text))", (QUEUE,))
    assert scalar(coordinator, "select count(distinct nodeport) from citus_shards "
                               "where table_name = 'app_orders'::regclass"
                  ) == len(cluster.workers)
    assert scalar(coordinator, "select count(*) from app_orders") == 64
    assert scalar(coordinator, "select count(*) from jobs.job where key = 'batch'") == 1


# -- a worker ------------------------------------------------------------------------------

def test_a_worker_drains_on_the_coordinator_and_goes_on_while_a_node_is_down(
        cluster: LocalCluster, coordinator: psycopg.Connection[Any], tmp_path: Path) -> None:
    for order in range(1, 21):
        with coordinator.transaction():
            _order_and_job(coordinator, order, jobs_first=False)
    with spawner(cluster.coordinator, tmp_path, "worker") as start:
        worker = start("tests.worker_example_app:app", "--queue", QUEUE)
        wait_for(lambda: scalar(coordinator, "select count(*) = 20 from jobs.job "
                                             "where state = 'succeeded'"),
                 "the worker to finish the 20 jobs", timeout=120)

        cluster.stop_node(1)
        try:
            # an order whose shard is on the stopped node fails, and takes its job with it
            # (Citus: "failure on connection marked as essential")
            with pytest.raises(psycopg.Error), coordinator.transaction():
                coordinator.execute("select jobs.enqueue('example.echo', 'lost', "
                                    "'{\"n\": 0}', jsonb_build_object('queue', %s::text))",
                                    (QUEUE,))
                coordinator.execute("insert into app_orders select g, 1 "
                                    "from generate_series(100, 164) g")
            assert scalar(coordinator, "select count(*) from jobs.job where key = 'lost'") == 0
            # jobs that need no shard of that node are enqueued and run as before
            for n in range(5):
                coordinator.execute("select jobs.enqueue('example.echo', %s, "
                                    "jsonb_build_object('n', %s::int), "
                                    "jsonb_build_object('queue', %s::text))",
                                    (f"during-{n}", n, QUEUE))
            wait_for(lambda: scalar(coordinator, "select count(*) = 25 from jobs.job "
                                                 "where state = 'succeeded'"),
                     "the worker to run the jobs enqueued while a node was down", timeout=120)
        finally:
            cluster.start_node(1)
        assert worker.proc.poll() is None, worker.output()


# -- the pgTAP suite -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def pgtap_on_coordinator(cluster: LocalCluster) -> Iterator[Runner]:
    """A database of its own (the files expect a schema nothing else has touched), with
    pgTAP and the files' helpers; each file runs in a transaction and rolls back."""
    cluster.create_database("sqljobs_pgtap")
    dsn = cluster.nodes[0].dsn("sqljobs_pgtap")
    migrate.upgrade(dsn)
    ensure_pgtap(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((SQLTESTS / "_helpers.sql").read_bytes())
        yield Runner(conn)


@pytest.mark.parametrize("name", PGTAP_FILES)
def test_pgtap_file_on_the_coordinator(pgtap_on_coordinator: Runner, name: str,
                                       request: pytest.FixtureRequest) -> None:
    lines = pgtap_on_coordinator.run((SQLTESTS / name).read_text(encoding="utf-8"))
    report_tap(request.node, lines, name)
