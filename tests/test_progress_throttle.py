"""ctx.progress is throttled: a tight loop of reports makes a handful of writes, counted
at the SQL level (a trigger on the job's progress column), and the last value wins."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from pydantic import BaseModel

from sqljobs import App, JobContext, fresh_key
from tests.processes import wait_for
from tests.worker_helpers import running

COUNT_WRITES = """
create table if not exists progress_writes (job_id bigint not null);
create or replace function count_progress_write() returns trigger language plpgsql as $$
begin insert into public.progress_writes values (new.id); return null; end $$;
drop trigger if exists count_progress_writes on jobs.job;
create trigger count_progress_writes after update of progress on jobs.job
  for each row when (old.progress is distinct from new.progress)
  execute function public.count_progress_write();
"""


class Loop(BaseModel):
    n: int


def test_a_thousand_reports_make_a_handful_of_writes(conn: psycopg.Connection[Any],
                                                     db_dsn: str) -> None:
    conn.execute(COUNT_WRITES)
    app = App(db_dsn)
    took: dict[int, float] = {}

    @app.job(name="progress.loop", queue="progress", progress_every=0.5)
    async def loop(ctx: JobContext, payload: Loop) -> int:
        start = time.monotonic()
        for i in range(payload.n):
            assert await ctx.progress_async({"done": i + 1, "of": payload.n})
        took[ctx.job_id] = time.monotonic() - start
        return payload.n

    try:
        job_id = app.job_handle("progress.loop").enqueue({"n": 1000}, key=fresh_key()).id
        with running(app, concurrency=1):
            wait_for(lambda: conn.execute("select state = 'succeeded' from jobs.job where id = %s",
                                          (job_id,)).fetchone() == (True,), "the loop job")
    finally:
        app.close()
    writes = conn.execute("select count(*) from progress_writes where job_id = %s",
                          (job_id,)).fetchone()
    assert writes is not None
    # the first report at once, one per interval the loop lasted, the last before the ack
    assert 2 <= writes[0] <= 2 + int(took[job_id] / 0.5), (writes[0], took[job_id])
    assert conn.execute("select progress from jobs.job where id = %s",
                        (job_id,)).fetchone() == ({"done": 1000, "of": 1000},)
