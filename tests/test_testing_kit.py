"""sqljobs.testing, used the way a user uses it: pytest sessions of their own (pytester,
in a subprocess) with `-p sqljobs.testing`, on the harness's real PostgreSQL.

The shop example (examples/testing, shown in docs/howto-testing.md) and the Celery port
(examples/from_celery, docs/coming-from-celery.md) run whole; the
kit's other promises run as small user test files, some of which fail on purpose so
that their failure messages can be read.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def user(pytester: pytest.Pytester, pg_admin_dsn: str,
         monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user's project: the kit's databases on the harness's server, this checkout's
    sqljobs (and the examples) importable."""
    monkeypatch.setenv("SQLJOBS_TEST_DSN", pg_admin_dsn)
    monkeypatch.delenv("SQLJOBS_DSN", raising=False)
    paths = [str(ROOT / "pyclient"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    return pytester


def run(user: pytest.Pytester, *args: str) -> pytest.RunResult:
    return user.runpytest_subprocess("-p", "sqljobs.testing", "-p", "no:randomly",
                                     "-p", "no:cacheprovider", *args, timeout=300)


def test_the_shop_example_passes_under_the_plugin(user: pytest.Pytester) -> None:
    result = run(user, str(ROOT / "examples" / "testing" / "test_shop.py"),
                 "--rootdir", str(user.path))
    result.assert_outcomes(passed=6)


def test_the_celery_port_example_passes_under_the_plugin(user: pytest.Pytester) -> None:
    result = run(user, str(ROOT / "examples" / "from_celery" / "test_billing.py"),
                 "--rootdir", str(user.path))
    result.assert_outcomes(passed=3)


def test_the_plugin_is_opt_in(user: pytest.Pytester) -> None:
    user.makepyfile(test_plain="def test_db(sqljobs_db):\n    pass\n")
    result = user.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider",
                                       timeout=300)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'sqljobs_db' not found*"])


def test_without_a_dsn_the_kit_runs_a_private_embedded_server(
        user: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SQLJOBS_TEST_DSN")
    user.makepyfile(test_embedded='''
import os, psycopg

def test_a_database_on_the_embedded_server(sqljobs_db, pytestconfig):
    with psycopg.connect(sqljobs_db.dsn) as conn:
        assert conn.execute("select jobs.schema_version()").fetchone()[0] >= 1
        data = conn.execute("select current_setting('data_directory')").fetchone()[0]
    # under the project's pytest cache: not the machine's own server
    assert os.path.realpath(data).startswith(os.path.realpath(str(pytestconfig.rootpath)))
''')
    result = user.runpytest_subprocess("-p", "sqljobs.testing", "-p", "no:randomly",
                                       timeout=600)
    result.assert_outcomes(passed=1)
    # the session stopped the server it started
    assert not list(user.path.glob(".pytest_cache/d/sqljobs-testing/pg/postmaster.pid"))


def test_a_schema_owner_without_superuser_moves_the_clock(
        user: pytest.Pytester, pg_admin_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI's user is often such a role: it may create databases, and owns what it migrates
    role = f"kit_owner_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login createdb createrole").format(
            sql.Identifier(role)))
    try:
        monkeypatch.setenv("SQLJOBS_TEST_DSN", make_conninfo(pg_admin_dsn, user=role))
        user.makepyfile(test_owner='''
import psycopg

def test_the_owner_moves_the_clock(sqljobs_db):
    with psycopg.connect(sqljobs_db.dsn) as conn:
        assert conn.execute("select not rolsuper from pg_roles"
                            " where rolname = current_user").fetchone()[0]
    sqljobs_db.clock.advance(400 * 86400)
    with psycopg.connect(sqljobs_db.dsn) as conn:
        assert conn.execute("select jobs.now() - now() > interval '399 days'").fetchone()[0]
''')
        run(user).assert_outcomes(passed=1)
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


APP = '''
from pydantic import BaseModel
from sqljobs import App, JobContext, RetryPolicy

app = App()

class Mail(BaseModel):
    to: str
    subject: str = "hello"

@app.job(queue="mail", retry=RetryPolicy(max_attempts=2, base_s=30.0))
def send_mail(ctx: JobContext, mail: Mail) -> dict:
    ctx.progress({"to": mail.to})
    return {"sent": mail.to, "attempt": ctx.attempt}

@app.job(queue="mail")
async def with_steps(ctx: JobContext, mail: Mail) -> str:
    return await ctx.step.run_async("one", lambda: "done")

@app.job(queue="mail")
async def reminder(ctx: JobContext, mail: Mail) -> str:
    await ctx.step.sleep_async("a day later", 86400)
    return await ctx.step.run_async("remind", lambda: f"reminded {mail.to}")
'''


def test_a_failing_assert_enqueued_lists_what_was_enqueued_closest_first(
        user: pytest.Pytester) -> None:
    user.makepyfile(userapp=APP, test_mail='''
from sqljobs.testing import assert_enqueued, refute_enqueued
from userapp import Mail, app, send_mail

def test_wrong_address(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.enqueue(Mail(to="zed@example.com"), key="1", queue="bulk")
    send_mail.enqueue(Mail(to="bob@example.com"), key="2")
    send_mail.enqueue(Mail(to="ann@example.com"), key="3", queue="bulk")
    assert_enqueued(send_mail, payload={"to": "ann@example.com"}, queue="mail")

def test_nothing_enqueued(sqljobs_db):
    assert_enqueued("send_mail")

def test_refuted(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.enqueue(Mail(to="ann@example.com"), key="1")
    refute_enqueued(send_mail, payload=Mail(to="ann@example.com"))
''')
    result = run(user)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines([
        "*expected a job 'userapp.send_mail' queue='mail' payload={'to': 'ann@example.com'}; "
        "none of the 3 ready job(s) matches (closest first):",
        # off by one criterion (oldest first), then the job off by two
        "*#* userapp.send_mail queue='mail'*key='2'*",
        "*differs: payload?'to'? is 'bob@example.com', not 'ann@example.com'",
        "*#* userapp.send_mail queue='bulk'*key='3'*",
        "*differs: queue is 'bulk', not 'mail'",
        "*#* userapp.send_mail queue='bulk'*key='1'*",
        "*differs: queue is 'bulk', not 'mail'; payload?'to'? is 'zed@example.com'*",
    ])
    result.stdout.fnmatch_lines(["*expected a job 'send_mail', but no job is ready*"])
    result.stdout.fnmatch_lines([
        "*expected no job 'userapp.send_mail' payload={'to': 'ann@example.com', "
        "'subject': 'hello'}, found 1:",
        "*#* userapp.send_mail*"])


def test_the_clock_drain_and_perform(user: pytest.Pytester) -> None:
    user.makepyfile(userapp=APP, test_kit='''
import asyncio, os, psycopg, pytest
from psycopg.conninfo import make_conninfo
from sqljobs import queries
from sqljobs.testing import (Clock, ClockError, DrainTimeout, StepsNeedAJob, drain,
                             drain_async, enqueued, perform)
from userapp import Mail, app, reminder, send_mail, with_steps

def test_a_delayed_job_waits_for_the_clock(sqljobs_db):
    sqljobs_db.use(app)
    before = sqljobs_db.clock.now()
    send_mail.enqueue(Mail(to="ann@example.com"), key="1", delay=600)
    assert drain(app).outcomes == []
    moved = sqljobs_db.clock.advance(601)
    assert (moved - before).total_seconds() >= 601
    drained = drain(app)
    assert drained.counts == {"succeeded": 1}
    job = enqueued(send_mail, state="succeeded")[0]
    assert job.result == {"sent": "ann@example.com", "attempt": 1}
    assert job.progress == {"to": "ann@example.com"}

def test_a_durable_sleep_ends_when_the_clock_passes_it(sqljobs_db):
    sqljobs_db.use(app)
    reminder.enqueue(Mail(to="ann@example.com"), key="1")
    assert drain(app).counts == {"parked": 1}
    sqljobs_db.clock.advance(86399)
    assert drain(app).counts == {}
    sqljobs_db.clock.advance(1)
    assert drain(app).counts == {"succeeded": 1}
    assert enqueued(reminder, state="succeeded")[0].result == "reminded ann@example.com"

def test_the_clock_moves_only_sessions_of_the_test_dsn_and_only_for_the_owner(
        sqljobs_db, sqljobs_server):
    before = sqljobs_db.dsn
    sqljobs_db.clock.advance(10 * 365 * 86400)
    assert os.environ["SQLJOBS_DSN"] == sqljobs_db.dsn != before
    with psycopg.connect(sqljobs_db.dsn) as conn:
        assert conn.execute("select jobs.now() - now() > interval '9 years'").fetchone()[0]
    with psycopg.connect(before) as conn:  # a session opened otherwise: the real time
        assert conn.execute("select jobs.now() - now() < interval '1 day'").fetchone()[0]
    with psycopg.connect(sqljobs_server, autocommit=True) as admin:
        admin.execute("drop role if exists kit_reader")
        admin.execute("create role kit_reader login in role sqljobs_reader")
    try:
        # another role given the test's DSN gains nothing: the engine refuses it the
        # clock (SJ019), and so does the kit
        reader = make_conninfo(sqljobs_db.dsn, user="kit_reader")
        with psycopg.connect(reader) as conn, pytest.raises(psycopg.Error) as refused:
            conn.execute("select jobs.now()")
        assert refused.value.sqlstate == "SJ019"
        plain = make_conninfo(before, user="kit_reader")
        with pytest.raises(ClockError, match="kit_reader may not move the test clock"):
            Clock(lambda: plain, lambda when: None, None).advance(1)
    finally:
        with psycopg.connect(sqljobs_server, autocommit=True) as admin:
            admin.execute("drop owned by kit_reader")
            admin.execute("drop role kit_reader")
    with pytest.raises(ClockError, match="only moves forward"):
        sqljobs_db.clock.advance(-1)

def test_another_test_starts_at_the_real_time(sqljobs_db):
    with psycopg.connect(sqljobs_db.dsn) as conn:
        assert conn.execute("select jobs.now() - now() < interval '1 day'").fetchone()[0]

def test_a_paused_queue_times_the_drain_out(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.enqueue(Mail(to="ann@example.com"), key="1")
    app.client.run(__import__("sqljobs").queries.pause_queue("mail"))
    with pytest.raises(DrainTimeout, match="1 due in queues mail"):
        drain(app, timeout=1.0)

def test_an_asyncio_test_moves_the_clock_of_its_app_s_pools(sqljobs_db):
    async def main():
        sqljobs_db.use(app)
        await app.open_async()
        try:
            before = await app.async_client.run(queries.database_now())
            await send_mail.enqueue_async(Mail(to="ann@example.com"), key="1", delay=60)
            with pytest.raises(RuntimeError, match="advance_async"):
                sqljobs_db.clock.advance(61)
            await sqljobs_db.clock.advance_async(61)
            after = await app.async_client.run(queries.database_now())
            assert (after - before).total_seconds() >= 61
            assert (await drain_async(app)).counts == {"succeeded": 1}
        finally:
            await app.close_async()
    asyncio.run(main())

def test_perform_gives_a_real_context_and_no_steps():
    progress = []
    assert perform(send_mail, {"to": "ann@example.com"}, attempt=2, progress=progress) == {
        "sent": "ann@example.com", "attempt": 2}
    assert progress == [{"to": "ann@example.com"}]
    with pytest.raises(StepsNeedAJob, match="drain"):
        perform(with_steps, {"to": "ann@example.com"})
    with pytest.raises(Exception, match="does not validate"):
        perform(send_mail, {"subject": "no address"})
''')
    result = run(user, "-q")
    result.assert_outcomes(passed=7)


def test_a_one_pass_drain_whose_worker_ends_the_pass_before_the_drain_looks(
        user: pytest.Pytester) -> None:
    """The drain waits for its worker's first claim by looking at it now and then. A pass
    of quick jobs can start every job, and so stop the worker, between two looks; the
    drain must take that for a start, not for a worker that never started. The drain's
    first look here waits for the worker to end the pass: that order, at any speed."""
    user.makepyfile(userapp=APP, test_pass='''
import asyncio

import sqljobs.testing._drain as kit_drain
from sqljobs.testing import drain
from userapp import Mail, app, send_mail

def test_the_pass_ran_whole_before_the_first_look(sqljobs_db, monkeypatch):
    sqljobs_db.use(app)
    send_mail.enqueue(Mail(to="ann@example.com"), key="1")
    send_mail.enqueue(Mail(to="bob@example.com"), key="2")
    look = kit_drain._look

    async def first_look_after_the_pass(running, deadline, loop, left):
        monkeypatch.setattr(kit_drain, "_look", look)
        await asyncio.wait_for(asyncio.shield(running), 60)  # the worker ends the pass

    monkeypatch.setattr(kit_drain, "_look", first_look_after_the_pass)
    one = drain(app, until_empty=False)
    assert [o.outcome for o in one.outcomes] == ["succeeded", "succeeded"]
''')
    result = run(user, "-q")
    result.assert_outcomes(passed=1)


def test_the_actor_and_tenant_filters_and_a_drain_of_some_queues_or_one_pass(
        user: pytest.Pytester) -> None:
    user.makepyfile(userapp=APP + '''
@app.job(queue="mail")
def announce(ctx: JobContext, mail: Mail) -> None:
    send_mail.enqueue(mail, key=f"then-{ctx.key}")  # what the run enqueues

@app.job(queue="bulk")
def bulk_mail(ctx: JobContext, mail: Mail) -> None:
    pass
''', test_filters='''
from sqljobs.testing import assert_enqueued, drain, enqueued, refute_enqueued
from userapp import Mail, announce, app, bulk_mail, send_mail

def test_actor_and_tenant(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.as_({"user": "42"}).enqueue(Mail(to="ann@example.com"), key="1", tenant="acme")
    send_mail.as_("svc:billing").enqueue(Mail(to="bob@example.com"), key="2")
    send_mail.enqueue(Mail(to="cid@example.com"), key="3")
    assert assert_enqueued(send_mail, actor={"user": "42"}).key == "1"
    assert assert_enqueued(send_mail, tenant="acme").actor == {"user": "42"}
    assert assert_enqueued(send_mail, actor="svc:billing", tenant=None).key == "2"
    assert [j.key for j in enqueued(actor=None)] == ["3"]
    assert [j.key for j in enqueued(tenant=None)] == ["2", "3"]
    refute_enqueued(send_mail, actor={"user": "42"}, tenant="globex")
    refute_enqueued(send_mail, actor={"user": "7"})

def test_a_wrong_actor_fails(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.as_({"user": "42"}).enqueue(Mail(to="ann@example.com"), key="1")
    assert_enqueued(send_mail, actor={"user": "7"})

def test_a_refuted_actor_fails(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.as_("svc:billing").enqueue(Mail(to="ann@example.com"), key="1")
    refute_enqueued(actor="svc:billing")

def test_a_drain_of_some_queues_leaves_the_others(sqljobs_db):
    sqljobs_db.use(app)
    send_mail.enqueue(Mail(to="ann@example.com"), key="1")
    bulk_mail.enqueue(Mail(to="bob@example.com"), key="2")
    drained = drain(app, queues=["bulk"])
    assert [(o.name, o.queue, o.outcome) for o in drained.outcomes] == [
        ("userapp.bulk_mail", "bulk", "succeeded")]
    assert_enqueued(send_mail, key="1")
    assert drain(app).counts == {"succeeded": 1}

def test_one_pass_runs_what_was_due_at_the_call_only(sqljobs_db):
    sqljobs_db.use(app)
    announce.enqueue(Mail(to="ann@example.com"), key="a")
    announce.enqueue(Mail(to="bob@example.com"), key="b")
    send_mail.enqueue(Mail(to="cid@example.com"), key="later", delay=60)
    one = drain(app, until_empty=False)
    assert [(o.name, o.outcome) for o in one.outcomes] == [
        ("userapp.announce", "succeeded"), ("userapp.announce", "succeeded")]
    # what they enqueued waits for the next drain; so does the job due later
    assert sorted(j.key for j in enqueued(send_mail)) == ["later", "then-a", "then-b"]
    sqljobs_db.clock.advance(61)
    assert drain(app, until_empty=False).counts == {"succeeded": 3}
    assert drain(app, until_empty=False).outcomes == []  # nothing was due
    announce.enqueue(Mail(to="dan@example.com"), key="d")
    assert drain(app).counts == {"succeeded": 2}  # until empty: the child too
''')
    result = run(user, "-q")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*expected a job 'userapp.send_mail' actor={'user': '7'}; none of the 1 ready "
        "job(s) matches (closest first):",
        "*#* userapp.send_mail queue='mail' tenant=None key='1' actor={'user': '42'} payload=*",
        "*differs: actor is {'user': '42'}, not {'user': '7'}"])
    result.stdout.fnmatch_lines([
        "*expected no job actor='svc:billing', found 1:",
        "*#* userapp.send_mail*actor='svc:billing'*"])
