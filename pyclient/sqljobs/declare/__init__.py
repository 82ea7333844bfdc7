"""The declarations layer: an `App`, its jobs, tasks and retry policies.

    app.py        `App`: connection settings, pools, declarations
    jobs.py       `@app.job`: JobDefinition, JobHandle (enqueue, stage), RetryPolicy
    tasks.py      `@app.task`: a job with a cron schedule; cron.py parses the schedule
    schedules.py  schedules stored in the database, managed at run time
    control.py    `Retry` / `Snooze`: what a handler raises to steer its job

Built on the client layer; it never imports the runtime, except where `App` hands a
caller to it (`App.run_worker`, a documented plug-in point).
"""
