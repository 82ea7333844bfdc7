"""`app.export_rows` and `app.import_rows` end to end: real tables, local files through
fsspec (`file://`), a real worker; and a SIGKILL mid-import resumed at its byte offset."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from sqljobs import App, ConfigurationError, ImportPage, fresh_key
from tests.processes import scalar, spawner, wait_for
from tests.worker_helpers import running

SCHEMA = """
create table if not exists public.tx_orders (id integer primary key, tenant text not null,
  amount integer not null);
create table if not exists public.tx_loaded (line_id integer not null, tenant text,
  amount integer not null, page integer not null, pid integer not null);
"""


class Order(BaseModel):
    id: int
    tenant: str
    amount: int


@pytest.fixture
def orders(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    conn.execute(SCHEMA)
    conn.execute("truncate public.tx_orders, public.tx_loaded")
    conn.execute("insert into public.tx_orders select i, case when i % 3 = 0 then 'globex' "
                 "else 'acme' end, i * 10 from generate_series(1, 25) i")
    yield conn


def finished(conn: psycopg.Connection[Any], job_id: int, state: str = "succeeded") -> Any:
    wait_for(lambda: scalar(conn, "select state::text from jobs.job where id = %s",
                            (job_id,)) in ("succeeded", "failed", "dead"), f"job {job_id}")
    row = conn.execute("select state::text, result, last_error from jobs.job where id = %s",
                       (job_id,)).fetchone()
    assert row is not None and row[0] == state, row
    return row[1] if state == "succeeded" else row[2]


# -- declaration -----------------------------------------------------------------------------

def test_declarations_are_checked_where_they_are_written() -> None:
    app = App("postgresql://unused")
    with pytest.raises(ConfigurationError, match="smaller than max_record_bytes"):
        app.import_rows("i", page_bytes=100, max_record_bytes=101)(lambda page: None)
    with pytest.raises(ConfigurationError, match="csv or jsonl"):
        app.import_rows("i", format="xml")(lambda page: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs key"):
        app.export_rows("e", source="select 1 as id", key=(), url="file:///tmp/x")
    app.import_rows("i", page_bytes=100, max_record_bytes=100)(lambda page: None)
    assert "i" in app.jobs


# -- export ----------------------------------------------------------------------------------

def test_an_export_writes_one_object_per_page_named_by_its_index(
        db_dsn: str, orders: psycopg.Connection[Any], tmp_path: Path) -> None:
    app = App(db_dsn)
    app.export_rows("orders.export", source="select id, tenant, amount from public.tx_orders",
                    key="id", url=f"file://{tmp_path}/all", page=10)
    app.export_rows("orders.csv", source="select id, amount from public.tx_orders", key="id",
                    url=f"file://{tmp_path}/csv", page=20, format="csv")
    with app, running(app):
        result = finished(orders, app.jobs["orders.export"].enqueue({}, key=fresh_key()).id)
        as_csv = finished(orders, app.jobs["orders.csv"].enqueue({}, key=fresh_key()).id)
    assert result == {"url": f"file://{tmp_path}/all", "pages": 3, "rows": 25}
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == [
        "part-000001.jsonl", "part-000002.jsonl", "part-000003.jsonl"]
    third = [json.loads(line) for line in
             (tmp_path / "all" / "part-000003.jsonl").read_text().splitlines()]
    assert [r["id"] for r in third] == [21, 22, 23, 24, 25]
    assert as_csv["pages"] == 2
    assert (tmp_path / "csv" / "part-000002.csv").read_text().splitlines() == [
        "id,amount", "21,210", "22,220", "23,230", "24,240", "25,250"]


def test_an_export_does_not_cross_a_tenant_boundary(
        db_dsn: str, orders: psycopg.Connection[Any], tmp_path: Path) -> None:
    app = App(db_dsn)
    app.export_rows("orders.tenant", source="select id, tenant from public.tx_orders",
                    key="id", url=f"file://{tmp_path}/{{tenant}}", tenant_column="tenant")
    with app, running(app):
        done = finished(orders, app.jobs["orders.tenant"].enqueue(
            {}, key=fresh_key(), tenant="globex").id)
        refused = finished(orders, app.jobs["orders.tenant"].enqueue({}, key=fresh_key()).id,
                           "failed")
    assert done["rows"] == 8 and done["url"] == f"file://{tmp_path}/globex"
    exported = [json.loads(line) for line in
                (tmp_path / "globex" / "part-000001.jsonl").read_text().splitlines()]
    assert {r["tenant"] for r in exported} == {"globex"}
    assert "TransferRefused" in json.dumps(refused), "no tenant: refused, not every tenant's"
    assert not (tmp_path / "acme").exists()


# -- import ----------------------------------------------------------------------------------

def loader(app: App, dsn: str, **options: Any) -> None:
    @app.import_rows("orders.import", model=Order, **options)
    async def load(page: ImportPage) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "insert into public.tx_loaded select unnest(%s::int[]), unnest(%s::text[]), "
                "unnest(%s::int[]), %s, %s",
                ([o.id for o in page.records], [o.tenant for o in page.records],
                 [o.amount for o in page.records], page.number, os.getpid()))


def test_an_import_reports_bad_records_by_place_never_by_value(
        db_dsn: str, orders: psycopg.Connection[Any], tmp_path: Path) -> None:
    lines = ["id,tenant,amount"]
    for i in range(1, 41):
        lines.append(f"{i},acme,{i * 5}")
    lines[7] = "7,acme,SECRET-NOT-A-NUMBER"        # line 8: amount is not an int
    lines[12] = "12,acme"                          # line 13: a field short
    lines[30] = "30,acme," + "9" * 400             # line 31: larger than max_record_bytes
    source = tmp_path / "orders.csv"
    source.write_text("\n".join(lines) + "\n")
    app = App(db_dsn)
    loader(app, db_dsn, page_bytes=256, max_record_bytes=128)
    with app, running(app):
        result = finished(orders, app.jobs["orders.import"].enqueue(
            {"url": f"file://{source}"}, key=fresh_key()).id)
    assert (result["accepted"], result["refused"]) == (37, 3)
    assert result["pages"] >= 4, "pages of at most 256 bytes"
    places = {(e["line"], e.get("field"), e["reason"]) for e in result["errors"]}
    assert places == {(8, "amount", "int_parsing"), (13, None, "2 fields, the header has 3"),
                      (31, None, "record larger than max_record_bytes")}
    offsets = {e["line"]: e["byte"] for e in result["errors"]}
    data = source.read_bytes()
    assert data[offsets[8]:].startswith(b"7,acme,SECRET"), "the byte offset locates the record"
    everything = json.dumps(result) + json.dumps(scalar(
        orders, "select jsonb_agg(value) from jobs.step where job_id = (select max(id) "
                "from jobs.job)"))
    assert "SECRET" not in everything and "9" * 50 not in everything, "no value copied"
    assert scalar(orders, "select count(*) from public.tx_loaded") == 37


def test_an_import_refuses_another_tenants_records(
        db_dsn: str, orders: psycopg.Connection[Any], tmp_path: Path) -> None:
    source = tmp_path / "acme" / "orders.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps({"id": i, "tenant": "acme" if i != 2 else "globex",
                                          "amount": i}) + "\n" for i in range(1, 5)))
    app = App(db_dsn)
    loader(app, db_dsn, format="jsonl", tenant_field="tenant",
           url=f"file://{tmp_path}/{{tenant}}/orders.jsonl")
    with app, running(app):
        result = finished(orders, app.jobs["orders.import"].enqueue(
            {}, key=fresh_key(), tenant="acme").id)
    assert (result["accepted"], result["refused"]) == (3, 1)
    assert result["errors"] == [{"line": 2, "byte": len(source.read_text().splitlines()[0]) + 1,
                                 "reason": "another tenant's record", "field": "tenant"}]
    assert scalar(orders, "select count(*) from public.tx_loaded where tenant <> 'acme'") == 0


# -- a crash ---------------------------------------------------------------------------------

app = App()  # the worker processes' app: `--app tests.test_transfer:app` ($SQLJOBS_DSN)


# the fourth page waits while the test holds page -1 (the SIGKILL lands in it)
app.export_rows("orders.crash_export", key="id", url="file:///nowhere", page=5,
                source="select id, tenant, amount, public.tx_gate(id) as gate "
                       "from public.tx_orders")


@app.import_rows("orders.crash", model=Order, page_bytes=200, max_record_bytes=100)
async def load_slowly(page: ImportPage) -> None:
    async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
        # page 4 waits while the test holds it: the SIGKILL lands inside it
        while await (await conn.execute("select count(*) from public.tx_hold where page = %s",
                                        (page.number,))).fetchone() != (0,):
            await conn.execute("select pg_sleep(0.05)")
        await conn.execute(
            "insert into public.tx_loaded select unnest(%s::int[]), unnest(%s::text[]), "
            "unnest(%s::int[]), %s, %s",
            ([o.id for o in page.records], [o.tenant for o in page.records],
             [o.amount for o in page.records], page.number, os.getpid()))


@pytest.mark.slow
def test_sigkill_mid_import_resumes_at_the_byte_offset(
        db_dsn: str, orders: psycopg.Connection[Any], tmp_path: Path) -> None:
    orders.execute("create table if not exists public.tx_hold (page integer primary key)")
    orders.execute("truncate public.tx_hold")
    orders.execute("insert into public.tx_hold values (4)")
    source = tmp_path / "big.csv"
    source.write_text("id,tenant,amount\n" + "".join(f"{i},acme,{i}\n" for i in range(1, 201)))
    app.pools.given = db_dsn
    with app:
        job = app.jobs["orders.crash"].enqueue({"url": f"file://{source}"}, key=fresh_key())
    args = ("tests.test_transfer:app", "--queue", "default", "--lease", "2",
            "--poll-interval", "0.2", "--concurrency", "1")
    with spawner(db_dsn, tmp_path, "worker") as start:
        first = start(*args)
        wait_for(lambda: scalar(orders, "select count(*) from jobs.step where job_id = %s and "
                                        "name = 'page-3'", (job.id,)) == 1,
                 "three pages stored, the fourth held")
        first.kill()
        stored = dict(orders.execute("select name, value->>'offset' from jobs.step "
                                     "where job_id = %s", (job.id,)).fetchall())
        orders.execute("delete from public.tx_hold")
        second = start(*args)
        result = finished(orders, job.id)
        second.kill()
    assert (result["accepted"], result["refused"]) == (200, 0)
    counts = dict(orders.execute("select line_id, count(*) from public.tx_loaded "
                                 "group by line_id").fetchall())
    assert counts == {i: 1 for i in range(1, 201)}, "every record once: no stored page again"
    by_pid = orders.execute("select min(page), max(page) from public.tx_loaded "
                            "group by pid order by 1").fetchall()
    assert [low for low, _ in by_pid] == [1, 4] and by_pid[0][1] == 3, \
        "the second worker began at the page in flight"
    assert int(stored["page-3"]) == scalar(
        orders, "select (value->>'offset')::int from jobs.step where job_id = %s and "
                "name = 'page-3'", (job.id,)), "the stored offset was not rewritten"


def test_the_how_to_example_runs(db_dsn: str, conn: psycopg.Connection[Any],
                                 tmp_path: Path) -> None:
    from examples.transfer import app as module

    example = module.app
    example.pools.given = db_dsn
    conn.execute(module.ORDERS)
    conn.execute("truncate public.orders")
    source = tmp_path / "orders.csv"
    source.write_text("id,customer,amount_cents\n1,ada,500\n2,grace,not-a-number\n3,alan,70\n")
    with example, running(example):
        loaded = finished(conn, example.jobs["orders.import"].enqueue(
            {"url": f"file://{source}"}, key=fresh_key()).id)
        exported = finished(conn, example.jobs["orders.export"].enqueue(
            {"url": f"file://{tmp_path}/out"}, key=fresh_key()).id)
    assert (loaded["accepted"], loaded["refused"]) == (2, 1)
    assert loaded["errors"] == [{"line": 3, "byte": 35, "reason": "int_parsing",
                                 "field": "amount_cents"}]
    assert exported == {"url": f"file://{tmp_path}/out", "pages": 1, "rows": 2}
    assert (tmp_path / "out" / "part-000001.jsonl").read_text().count("\n") == 2


@pytest.mark.slow
def test_sigkill_mid_export_resumes_at_the_cursor_and_rewrites_no_stored_page(
        db_dsn: str, orders: psycopg.Connection[Any], tmp_path: Path) -> None:
    orders.execute("create table if not exists public.tx_hold (page integer primary key)")
    orders.execute("truncate public.tx_hold")
    orders.execute("insert into public.tx_hold values (-1)")
    orders.execute("""create or replace function public.tx_gate(p_id integer) returns integer
        language plpgsql as $$ begin
          -- (the page query computes this for every row: hold once three pages are stored)
          while exists (select from public.tx_hold where page = -1) and (
              select count(*) from jobs.step s join jobs.job j on j.id = s.job_id
               where j.name = 'orders.crash_export' and s.name like 'page-%%') >= 3 loop
            perform pg_sleep(0.05);
          end loop;
          return 0;
        end $$""")
    app.pools.given = db_dsn
    out = tmp_path / "export"
    with app:
        job = app.jobs["orders.crash_export"].enqueue({"url": f"file://{out}"},
                                                      key=fresh_key())
    args = ("tests.test_transfer:app", "--queue", "default", "--lease", "2",
            "--poll-interval", "0.2", "--concurrency", "1")
    with spawner(db_dsn, tmp_path, "worker") as start:
        first = start(*args)
        wait_for(lambda: scalar(orders, "select count(*) from jobs.step where job_id = %s and "
                                        "name = 'page-3'", (job.id,)) == 1,
                 "three pages stored, the fourth held")
        first.kill()
        written = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
        assert sorted(written) == ["part-000001.jsonl", "part-000002.jsonl",
                                   "part-000003.jsonl"]
        orders.execute("delete from public.tx_hold")
        second = start(*args)
        result = finished(orders, job.id)
        second.kill()
    assert result == {"url": f"file://{out}", "pages": 5, "rows": 25}
    ids = [json.loads(line)["id"] for part in sorted(out.iterdir())
           for line in part.read_text().splitlines()]
    assert ids == list(range(1, 26)), "every row in exactly one object, in key order"
    assert {name: (out / name).stat().st_mtime_ns for name in written} == written, \
        "a stored page's object is not written again"
