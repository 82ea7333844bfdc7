"""The schema installed by a role that is NOT a superuser (docs/design/roles.md, "Who owns
the schema"): a login role with CREATEROLE that owns its database (so it may create the
schema, and Alembic's version table in `public`) runs `sqljobs migrate`; it then owns
every jobs function, each security definer; the sqljobs roles work through their
grants; the owner may use the test clock and a worker's login may not.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from sqljobs import SettingRefused
from sqljobs._client import queries
from sqljobs._client.connection import Client
from sqljobs._schema import migrate
from tests.harness.server import make_dsn


@pytest.fixture
def owned(pg_admin_dsn: str, new_database: Any) -> Iterator[tuple[str, str, str]]:
    """(owner's DSN, a worker login's DSN, the worker login) on a new empty database."""
    owner, worker = f"sqljobs_owner_{secrets.token_hex(3)}", f"sqljobs_wk_{secrets.token_hex(3)}"
    dsn = new_database()
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create role {} login createrole").format(sql.Identifier(owner)))
        admin.execute(sql.SQL("alter database {} owner to {}").format(
            sql.Identifier(str(dbname)), sql.Identifier(owner)))
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(worker)))
    try:
        yield (make_conninfo(make_dsn(pg_admin_dsn, str(dbname)), user=owner),
               make_conninfo(make_dsn(pg_admin_dsn, str(dbname)), user=worker), worker)
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(str(dbname))))
            for role in (worker, owner):
                admin.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
                admin.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def test_a_non_superuser_owner_installs_and_the_roles_hold(
        owned: tuple[str, str, str], pg_admin_dsn: str) -> None:
    owner_dsn, worker_dsn, worker = owned
    migrate.upgrade(owner_dsn)
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        assert conn.execute("select rolsuper from pg_roles where rolname = current_user"
                            ).fetchone() == (False,)
        wrong = conn.execute(
            "select p.oid::regprocedure::text from pg_proc p "
            "where p.pronamespace = 'jobs'::regnamespace "
            "and (pg_get_userbyid(p.proowner) <> current_user or not p.prosecdef)").fetchall()
        assert wrong == [], "every jobs function is the owner's, and security definer"
        # the owner is the schema's owner: its test clock moves the engine's time
        conn.execute("set jobs.fake_now = '2030-01-01T00:00:00Z'")
        assert str(conn.execute("select jobs.now()").fetchone()[0])[:4] == "2030"  # type: ignore[index]
        conn.execute("reset jobs.fake_now")
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:  # (the DBA hands out roles)
        admin.execute(sql.SQL("grant sqljobs_worker to {}").format(sql.Identifier(worker)))

    with psycopg.connect(worker_dsn, autocommit=True) as conn:
        client = Client(conn)
        made = client.run(queries.enqueue("owner.job", "k1", {}, {"queue": "owned"}))
        [job] = client.run(queries.claim(["owned"], "w", 1, 30))
        assert job.id == made.id and job.claim > 2 ** 32  # an unguessable token
        assert [s.ok for s in client.run(queries.ack_many([job.id], [job.claim]))] == [True]
        # a worker's login may not move the clock, nor reach the tables
        conn.execute("set jobs.fake_now = '2100-01-01T00:00:00Z'")
        with pytest.raises(SettingRefused):
            client.run(queries.enqueue("owner.job", "k2", {}, {"queue": "owned"}))
        conn.execute("reset jobs.fake_now")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select count(*) from jobs.job")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("select jobs.purge(1000)")


def test_a_function_the_owner_makes_later_in_jobs_is_not_publics(
        owned: tuple[str, str, str], pg_admin_dsn: str) -> None:
    """A function made in schema jobs outside a revision (a hotfix by hand, as the owner)
    is executable by nobody but the owner: install_roles() takes EXECUTE from PUBLIC in
    the owner's default privileges. Logged in as a producer and as a reader, calling it
    is refused with 42501."""
    owner_dsn, _, _ = owned
    migrate.upgrade(owner_dsn)
    logins = {f"sqljobs_{role}_{secrets.token_hex(3)}": role for role in ("producer", "reader")}
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        for login, role in logins.items():
            admin.execute(sql.SQL("create role {} login in role {}").format(
                sql.Identifier(login), sql.Identifier(f"sqljobs_{role}")))
    try:
        with psycopg.connect(owner_dsn, autocommit=True) as conn:
            assert conn.execute(
                "select count(*) from pg_default_acl "
                "where defaclrole = current_user::regrole and defaclobjtype = 'f' "
                "and defaclnamespace = 0").fetchone() == (1,)
            conn.execute("create function jobs.added_later() returns int security definer "
                         "language sql set search_path = '' "
                         "as 'select count(*)::int from jobs.job'")
            assert conn.execute("select jobs.added_later()").fetchone() == (0,)
        for login in logins:
            with psycopg.connect(make_conninfo(owner_dsn, user=login), autocommit=True) as conn:
                assert conn.execute("select has_function_privilege('jobs.added_later()', 'execute')"
                                    ).fetchone() == (False,)
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("select jobs.added_later()")
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            for login in logins:
                admin.execute(sql.SQL("drop role {}").format(sql.Identifier(login)))
