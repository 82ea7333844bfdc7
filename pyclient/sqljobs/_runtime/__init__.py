"""The runtime: what runs jobs, built on the client and the declarations.

    lifecycle.py  the skeleton of every long-running role: pool, schema check, signals,
                  background tasks, one backoff policy, drain, shutdown
    worker/       claims, runs and settles jobs (one file per step of a job's path)
    scheduler.py  the cron leader; relay.py the outbox relay
    context.py    JobContext, what a handler gets as `ctx`
    steps.py      durable steps, sleeps, event waits, child jobs, sagas (and how a run
                  with compensations ends)
    roles.py      several roles in one process; threads.py the sync handlers' threads
    listening.py  the LISTEN connection that wakes a role

It reads an application through the protocols of sqljobs._declare.protocols, never
`App`; nothing below it imports it, and `App` (sqljobs._app, above it) starts a worker.
"""
