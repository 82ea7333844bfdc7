"""The runtime: what runs jobs, built on the client and the declarations.

    context.py    JobContext, what a handler gets as `ctx`
    steps.py      durable steps, sleeps, event waits, child jobs, sagas
    worker/       claims, runs and settles jobs (one file per step of a job's path)
    scheduler.py  the cron leader; relay.py the outbox relay
    lifecycle.py  stop control and signals shared by those roles
    roles.py      several roles in one process; threads.py the sync handlers' threads
    listening.py  the LISTEN connection that wakes a role

Nothing below this layer (sqljobs.client, sqljobs.declare) imports it; `App` reaches
it only through `App.run_worker` / `run_worker_async`, a documented plug-in point.
"""
