"""Bad input at every public SQL function, and at the Python client (issue 15).

The public functions are the ones some sqljobs role may execute (`jobs.role_grants()`,
docs/design/roles.md); their argument types come from pg_proc, and hypothesis draws each
argument from adversarial pools: NUL bytes, quotes and semicolons in names, huge and
deeply nested JSON, JSON with \\u0000, NaN and infinities, extreme timestamps, empty and
10,000-element arrays, malformed cron strings and time zones, match documents of every
JSON type, SQL NULL.

Every call either succeeds or fails with one of our SQLSTATEs (class SJ) or a data
exception PostgreSQL raises while reading the input (class 22: 22P02 invalid text,
22P05 \\u0000, 22021 bad UTF-8, 22003/22008 out of range ...; class 54: too deep or too
large). Never an internal error, never a plain RAISE (P0001), never a statement timeout
(a hang), and a refused call leaves every table's row count as it was.

Poison values (docs/design/roles.md, "Bounds at the door"): infinite and extreme times,
1e308 durations, JSON nested past the 100-level bound, names past 200 bytes. One value a
caller may pass must not break what every other caller reads: after each ACCEPTED call
the fleet-wide reads (jobs.queue_gauges, queue_stats, queue_stats_v2, list_jobs, stats,
and jobs.declared_queues, the dashboard's list of queues) still answer, and so does the
metrics collector (sqljobs_gauges_up 1).

Each function is called logged in as a login role holding each sqljobs role it is
granted to (jobs.role_grants(); PUBLIC's three as the reader's login), not as the
superuser: what a producer, a worker or an operator may pass is what is tried. The
session runs on the real clock (jobs.fake_now is the owner's). Row counts and the fleet
reads are read as the superuser.

SQLJOBS_FUZZ_EXAMPLES sets the examples per function, shared among its roles (each gets
at least FUZZ_MIN_PER_ROLE; CI: the default; `make fuzz`: more).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo

from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._client.errors import DatabaseError

EXAMPLES = int(os.environ.get("SQLJOBS_FUZZ_EXAMPLES", "15"))
FUZZ_MIN_PER_ROLE = 5
ROLES = ("sqljobs_producer", "sqljobs_worker", "sqljobs_scheduler", "sqljobs_operator",
         "sqljobs_reader")
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

# refusals a caller can act on: ours, and PostgreSQL's own reading of bad input
ALLOWED_CLASSES = ("SJ", "22", "54")

NAMES = st.sampled_from([
    "", "a", "send_email", "x'; drop table jobs.job; --", '"quoted"', "semi;colon",
    "back\\slash", "tab\there", "ünïcödé", "名前", "x" * 201, "x" * 10_000, "%s%I%L",
    "default", "fuzz", "fuzz.job", "a b", " lead", "trail ", "\x00nul", "nul\x00", "\u202e",
    # cron strings and time zones, right and wrong
    "* * * * *", "61 * * * *", "*/0 * * * *", "@hourly", "@never", "1-0 * * * *",
    "* * * * * * *", "UTC", "Europe/Paris", "Mars/Olympus", "+99:99", "infinity",
]) | st.text(max_size=40)


def _json_leaves() -> st.SearchStrategy[Any]:
    return (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
            | st.floats(allow_nan=True, allow_infinity=True) | NAMES)


JSON_SPECIALS = st.sampled_from([
    {}, [], None, 0, "", True, {"a": "\u0000"}, {"\u0000": 1}, {"name": "x", "key": None},
    {"queue": "q'; --", "priority": 10 ** 30}, {"run_at": "infinity"},
    {"run_at": "294277-01-01T00:00:00Z"}, {"timeout_s": -1}, {"max_attempts": 0},
    {"cron": "61 * * * *", "tz": "Mars/Olympus"}, {"cron": "* * * * *", "tz": "+99:99"},
    {"every_s": 0}, {"every_s": 1e308}, {"match": 1}, {"match": "s"}, {"match": []},
    {"match": None}, {"match": True}, {"match": {"a": {"b": [1, {"c": None}]}}},
    {"concurrency": -1}, {"rate": {"per_s": 0}}, {"state": ["nope"]}, {"ids": [2 ** 63]},
    [{"name": "a", "key": "k"}] * 3, [{"name": "a"}] * 10_000, {"p": "x" * 2_000_000},
    # poison: what one producer could pass to break every reader
    {"run_at": "-infinity"}, {"run_at": "200000-01-01T00:00:00Z"}, {"delay_s": 1e308},
    {"retry_base_s": 1e308, "retry_cap_s": 1e308}, {"timeout_s": 1e308},
    {"debounce_s": 1e308}, {"throttle_n": 1, "throttle_per_s": 1e308},
    {"queue": "q" * 10_000}, {"tenant": "t" * 300}, {"group_key": "g" * 2_000},
])
# JSON nested past the 100-level bound, as an object a payload may be
DEEP = '{"a":' + "[" * 150 + "]" * 150 + "}"
JSONS: st.SearchStrategy[Any] = JSON_SPECIALS | st.recursive(_json_leaves(),
                                     lambda kids: st.lists(kids, max_size=4)
                                     | st.dictionaries(NAMES, kids, max_size=4),
                                     max_leaves=20)
# JSON as text: what the driver sends (NaN becomes the invalid token NaN), and nestings
# too deep for Python's own json module to write
JSON_TEXTS = JSONS.map(json.dumps) | st.sampled_from([
    "[" * 300 + "]" * 300, '{"a":' * 5_000 + "1" + "}" * 5_000, "[" * 100_000 + "]" * 100_000,
    DEEP, '[{"name": "a", "key": "k", "payload": ' + DEEP + "}]",
    '"\\u0000"', '{"a": "\\ud800"}', "NaN", "Infinity", "-0", "1e400",
])

BIG = 2 ** 63 - 1
BIGINTS = st.sampled_from([None, 0, 1, 2, 3, -1, BIG, -BIG - 1]) | st.integers(-BIG - 1, BIG)
INTS = (st.sampled_from([None, 0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 10_000])
        | st.integers(-(2 ** 31), 2 ** 31 - 1))
FLOATS = st.sampled_from([None, 0.0, -0.0, 1e-308, 1e308, -1.0, 30.0, 1e10, math.nan, math.inf,
                          -math.inf]) | st.floats(allow_nan=True, allow_infinity=True)
TIMES = st.sampled_from([
    None, "infinity", "-infinity", "epoch", "294276-12-31 23:59:59+00", "4713-01-01 00:00:00+00 BC",
    "2030-01-01 00:00:00+00", "1970-01-01 00:00:00+14",
]) | st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31),
                  timezones=st.just(dt.UTC)).map(lambda d: d.isoformat())


def _arrays(item: st.SearchStrategy[Any], huge: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from([None, [], [huge] * 10_000, [None]]) | st.lists(item, max_size=5)


STRATEGY_OF_TYPE: dict[str, st.SearchStrategy[Any]] = {
    "text": NAMES | st.none(),
    "jsonb": JSON_TEXTS | st.none(),
    "bigint": BIGINTS,
    "integer": INTS,
    "double precision": FLOATS,
    "timestamp with time zone": TIMES,
    "text[]": _arrays(NAMES, "q"),
    "bigint[]": _arrays(BIGINTS, 1),
    "jsonb[]": _arrays(JSON_TEXTS, "{}"),
    "double precision[]": _arrays(FLOATS, 1.0),
    "timestamp with time zone[]": _arrays(TIMES, "2030-01-01 00:00:00+00"),
    "boolean": st.sampled_from([None, True, False]),
}


def public_functions(dsn: str) -> list[tuple[str, list[str], list[str]]]:
    """(name, argument types, the sqljobs roles granted it) of every public function; a
    function granted to PUBLIC only (the view's three) is the reader's to call here."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("""
            select g.fn::text, p.proname,
                   array(select pg_catalog.format_type(t, null)
                           from unnest(p.proargtypes::oid[]) with ordinality a(t, n) order by n),
                   array_agg(distinct case g.role_name when 'public' then 'sqljobs_reader'
                                           else g.role_name end)
              from jobs.role_grants() g
              join pg_catalog.pg_proc p on p.oid = g.fn
             group by 1, 2, 3
             order by 1""").fetchall()
    return [(name, list(types), list(roles)) for _, name, types, roles in rows]


@pytest.fixture(scope="module")
def role_conns(db_dsn: str, pg_admin_dsn: str) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """A session per sqljobs role, logged in as a login role that holds only it."""
    logins = {role: f"fuzz_{role.removeprefix('sqljobs_')}_{secrets.token_hex(3)}"
              for role in ROLES}
    conns: dict[str, psycopg.Connection[Any]] = {}
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        for role, login in logins.items():
            admin.execute(sql.SQL("create role {} login in role {}").format(
                sql.Identifier(login), sql.Identifier(role)))
    try:
        for role, login in logins.items():
            conns[role] = psycopg.connect(make_conninfo(db_dsn, user=login), autocommit=True)
            conns[role].execute("set statement_timeout = '20s'")
        yield conns
    finally:
        for conn in conns.values():
            conn.close()
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            for login in logins.values():
                admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))


@pytest.fixture(scope="module")
def fuzz_conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("set statement_timeout = '20s'")
        conn.execute("set jobs.fake_now = '2030-01-01 00:00:00+00'")
        # a few real jobs so that ids and claims hit rows
        for key in ("a", "b", "c"):
            conn.execute("select jobs.enqueue('fuzz.job', %s, '{}', %s)",
                         (key, json.dumps({"queue": "fuzz"})))
        conn.execute("select jobs.claim(array['fuzz'], 'w', 1)")
        yield conn


def row_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    tables = [r[0] for r in conn.execute(
        "select format('%I.%I', schemaname, tablename) from pg_tables where schemaname = 'jobs'"
        " order by 1").fetchall()]
    query = sql.SQL(" union all ").join(
        sql.SQL("select {}, count(*) from {}").format(sql.Literal(t), sql.SQL(t)) for t in tables)
    return dict(conn.execute(query).fetchall())  # type: ignore[arg-type]


def check_refusal(error: psycopg.Error, what: str) -> None:
    sqlstate = error.diag.sqlstate
    if sqlstate is None:
        # refused by the driver before it was sent: a NUL byte in a text value
        assert isinstance(error, psycopg.DataError), f"{what}: {error!r}"
        return
    assert sqlstate.startswith(ALLOWED_CLASSES), f"{what}: {sqlstate} {error}"
    # PostgreSQL's own refusals are fine while it reads the arguments; once inside one of
    # our functions, bad input must get our own code (a clear, typed error)
    inside = "function jobs." in (error.diag.context or "")
    assert sqlstate.startswith("SJ") or not inside, (
        f"{what}: {sqlstate} from inside the function: {error.diag.message_primary}")


FLEET_READS = ("select count(*) from jobs.queue_gauges()",
               "select count(*) from jobs.queue_stats()",
               "select count(*) from jobs.queue_stats_v2()",
               "select count(*) from jobs.list_jobs('{}', null, 50)",
               "select count(*) from jobs.stats(3600)",
               # the dashboard's list of queues (and the gauges' and metrics' rows)
               "select count(*) from jobs.declared_queues()")


@pytest.fixture(scope="module")
def collector(db_dsn: str) -> Iterator[Any]:
    """The Prometheus collector, reading afresh at every scrape (one connection)."""
    from sqljobs.metrics import QueueGaugeCollector

    scraper = QueueGaugeCollector(db_dsn, cache_s=0)
    yield scraper
    scraper.close()


def metrics_scrape(collector: Any) -> bool:
    """Whether the Prometheus collector reads the gauges (sqljobs_gauges_up = 1)."""
    up = [s.value for family in collector.collect() for s in family.samples
          if s.name == "sqljobs_gauges_up"]
    return bool(up == [1.0])


def fleet_reads_answer(admin: psycopg.Connection[Any], collector: Any, what: str) -> None:
    for read in FLEET_READS:
        try:
            admin.execute(read)
        except psycopg.Error as error:
            raise AssertionError(f"{what}: accepted, then {read.split(' from ')[1]} fails: "
                                 f"{error.diag.sqlstate} {error}") from error
    assert metrics_scrape(collector), f"{what}: accepted, then the metrics collector fails"


def call_checked(conn: psycopg.Connection[Any], admin: psycopg.Connection[Any], collector: Any,
                 statement: sql.Composable, args: list[Any], what: str) -> bool:
    """Call as `conn` (a role's login); count rows and read the fleet as `admin`. Answers
    whether the call was accepted."""
    before = row_counts(admin)
    try:
        conn.execute(statement, args)
    except psycopg.Error as error:
        check_refusal(error, what)
        assert row_counts(admin) == before, f"{what}: refused, yet rows changed"
        return False
    fleet_reads_answer(admin, collector, what)
    return True


@pytest.fixture(scope="module")
def signatures(db_dsn: str) -> list[tuple[str, list[str], list[str]]]:
    return public_functions(db_dsn)


def test_every_public_function_takes_bad_input(
        fuzz_conn: psycopg.Connection[Any], role_conns: dict[str, psycopg.Connection[Any]],
        collector: Any, signatures: list[tuple[str, list[str], list[str]]]) -> None:
    assert len(signatures) > 60, "the public functions: jobs.role_grants()"
    unknown = {t for _, types, _ in signatures for t in types} - STRATEGY_OF_TYPE.keys()
    assert not unknown, f"no strategy for argument types {unknown}"
    tried = {role for _, _, roles in signatures for role in roles}
    assert {"sqljobs_producer", "sqljobs_worker", "sqljobs_operator"} <= tried
    defects: list[str] = []
    accepted = dict.fromkeys(tried, 0)
    for name, types, roles in signatures:
        statement = sql.SQL("select 1 from (select jobs.{}({})) as called").format(
            sql.Identifier(name),
            sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(t)) for t in types))
        examples = max(FUZZ_MIN_PER_ROLE, -(-EXAMPLES // len(roles)))
        for role in roles:
            try:
                fuzzer(role_conns[role], fuzz_conn, collector, statement,
                       f"jobs.{name} as {role}", types, examples, accepted, role)()
            except AssertionError as defect:
                defects.append(found_by(defect))
            except ExceptionGroup as found:  # hypothesis found several distinct defects
                defects += [found_by(defect) for defect in found.exceptions]
    assert not defects, "\n".join(defects)
    # (the checks after an accepted call ran, as each role)
    assert all(accepted[role] > 0 for role in
               ("sqljobs_producer", "sqljobs_worker", "sqljobs_operator")), accepted


def found_by(defect: BaseException) -> str:
    """A defect's first line, and the start of the example Hypothesis found it with (its
    note), so that a failed run says which input to try again."""
    first = str(defect).splitlines()[0]
    notes = [" ".join(n.split()) for n in getattr(defect, "__notes__", [])
             if n.startswith(("Failing test case", "Falsifying example"))]
    return f"{first}; {notes[0][:400]}" if notes else first


def fuzzer(conn: psycopg.Connection[Any], admin: psycopg.Connection[Any], collector: Any,
           statement: sql.Composable, what: str, types: list[str], examples: int,
           accepted: dict[str, int], role: str) -> Any:
    @settings(FUZZ, max_examples=examples)
    @given(st.tuples(*(STRATEGY_OF_TYPE[t] for t in types)))
    def fuzz_one(args: tuple[Any, ...]) -> None:
        if call_checked(conn, admin, collector, statement, list(args), what):
            accepted[role] += 1
    return fuzz_one


@FUZZ
@given(name=NAMES, key=NAMES, payload=JSONS,
       options=JSON_SPECIALS | st.dictionaries(NAMES, JSONS, max_size=3))
def test_the_client_enqueue_refuses_with_typed_errors(
        fuzz_conn: psycopg.Connection[Any], role_conns: dict[str, psycopg.Connection[Any]],
        name: str, key: str, payload: Any, options: Any) -> None:
    """As the producer's login."""
    before = row_counts(fuzz_conn)
    try:
        Client(role_conns["sqljobs_producer"]).run(queries.enqueue(name, key, payload,
                                              options if isinstance(options, dict) else {}))
    except DatabaseError:
        assert row_counts(fuzz_conn) == before
    except psycopg.Error as error:
        check_refusal(error, "Client.run(queries.enqueue)")
        assert row_counts(fuzz_conn) == before
    except (TypeError, ValueError):
        pass  # refused in Python (a value JSON cannot carry): nothing was sent


@FUZZ
@given(name=NAMES, payload=JSONS)
def test_the_client_emit_event_refuses_with_typed_errors(
        fuzz_conn: psycopg.Connection[Any], role_conns: dict[str, psycopg.Connection[Any]],
        name: str, payload: Any) -> None:
    """As the producer's login."""
    before = row_counts(fuzz_conn)
    try:
        Client(role_conns["sqljobs_producer"]).run(queries.emit_event(name,
                                                 payload if isinstance(payload, dict) else None))
    except DatabaseError:
        assert row_counts(fuzz_conn) == before
    except psycopg.Error as error:
        check_refusal(error, "Client.run(queries.emit_event)")
        assert row_counts(fuzz_conn) == before
    except (TypeError, ValueError):
        pass


def test_invalid_utf8_is_refused_before_any_function(
        fuzz_conn: psycopg.Connection[Any], role_conns: dict[str, psycopg.Connection[Any]]) -> None:
    before = row_counts(fuzz_conn)
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire):
        role_conns["sqljobs_producer"].execute(
            "select jobs.enqueue(convert_from(%s, 'UTF8'), 'k')", (b"\xff\xfe",))
    assert row_counts(fuzz_conn) == before
