"""The example shop's tests, run by Django's runner (`manage.py test shop`) on a real
PostgreSQL: the test database is made by `migrate`, sqljobs' schema included."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import TransactionTestCase
from psycopg.conninfo import make_conninfo

import sqljobs.contrib.django
from shop.jobs import Ship, app, ship_order
from shop.models import Order
from sqljobs import SCHEMA_VERSION
from sqljobs.testing import assert_enqueued, enqueued, refute_enqueued

PROJECT = Path(__file__).resolve().parents[1]
SAFETY_S = 120.0  # a bug turns into a failure, not a hung run; never what is asserted


class ShopTests(TransactionTestCase):
    """Transactions commit for real here: the worker, another process, sees them."""

    @classmethod
    def tearDownClass(cls) -> None:
        app.close()  # its pool's connections would keep Django from dropping the test db
        super().tearDownClass()

    def setUp(self) -> None:
        self.jobs_dsn = sqljobs.contrib.django.dsn()

    def order(self, email: str, amount: int) -> "tuple[int, dict]":
        response = self.client.post("/orders", {"email": email, "amount": amount},
                                    content_type="application/json")
        return response.status_code, response.json()

    def test_migrate_installed_the_schema_and_the_models_match_it(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("select jobs.schema_version()")
            self.assertEqual(cursor.fetchone()[0], SCHEMA_VERSION)
        call_command("check", databases=["default"])  # the schema check passes
        call_command("makemigrations", "--check", "--dry-run", verbosity=0)

    def test_an_order_and_its_job_commit_together(self) -> None:
        status, body = self.order("ann@example.com", 3)
        self.assertEqual(status, 201)
        assert_enqueued(ship_order, payload={"order_id": body["order"]}, queue="shipping",
                        dsn=self.jobs_dsn)

    def test_the_app_follows_django_into_the_test_database(self) -> None:
        # no conn=: the App's own pool, which the app config pointed at Django's
        # database, the test run's included
        ship_order.enqueue(Ship(order_id=0, email="eve@example.com"), key="no-conn")
        with connection.cursor() as cursor:
            cursor.execute("select count(*) from jobs.job_view where key = 'no-conn'")
            self.assertEqual(cursor.fetchone()[0], 1)

    def test_an_order_rolled_back_leaves_no_job(self) -> None:
        status, _ = self.order("bob@example.com", 500)
        self.assertEqual(status, 409)
        self.assertFalse(Order.objects.filter(email="bob@example.com").exists())
        refute_enqueued(ship_order, payload={"email": "bob@example.com"}, dsn=self.jobs_dsn)

    def test_the_worker_command_ships_the_order(self) -> None:
        _, body = self.order("cid@example.com", 7)
        env = {**os.environ, "SHOP_DATABASE_URL": make_conninfo(
            self.jobs_dsn, dbname=connection.settings_dict["NAME"])}
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "sqljobs", "worker", "--concurrency", "2",
             "--poll-interval", "0.2"], cwd=PROJECT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + SAFETY_S
            while not Order.objects.get(id=body["order"]).shipped:
                self.assertIsNone(worker.poll(), "the worker exited")
                self.assertLess(time.monotonic(), deadline, "the order was never shipped")
                time.sleep(0.1)  # polling observed state
        finally:
            worker.send_signal(signal.SIGTERM)  # drains, as the CLI's worker does
            output, _ = worker.communicate(timeout=SAFETY_S)
        self.assertEqual(worker.returncode, 0, output)
        [job] = enqueued(ship_order, payload={"order_id": body["order"]},
                         state="succeeded", dsn=self.jobs_dsn)
        self.assertEqual(job.result, {"shipped": body["order"]})

    def test_the_admin_lists_and_shows_jobs_read_only(self) -> None:
        _, body = self.order("dee@example.com", 1)
        [job] = enqueued(ship_order, payload={"order_id": body["order"]}, dsn=self.jobs_dsn)
        self.client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
        listing = self.client.get("/admin/sqljobs/job/", {"q": job.key})
        self.assertEqual(listing.status_code, 200)
        self.assertContains(listing, "shop.ship_order")
        detail = self.client.get(f"/admin/sqljobs/job/{job.id}/change/")
        self.assertEqual(detail.status_code, 200)
        self.assertContains(detail, job.key)
        self.assertNotContains(detail, 'type="submit" value="Save"')
        self.assertEqual(self.client.get("/admin/sqljobs/job/add/").status_code, 403)
