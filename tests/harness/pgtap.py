"""Make pgTAP available in a test database."""

from __future__ import annotations

import psycopg


def ensure_pgtap(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension if not exists pgtap")
