"""The declarations layer: what an application declares, and nothing that runs it.

    registry.py   `Registry`: `@app.job`, `@app.task`, `app.limit`, by name
    jobs.py       JobDefinition, JobHandle (enqueue, stage), RetryPolicy
    tasks.py      a job with a cron schedule; cron.py parses the schedule
    limits.py     declared limits (`key`, `Limit`) and the writes that store them
    redaction.py  the `Sensitive` / `PersonalData` markers, read off a payload model
    catalog.py    the job types a worker registers, and `sqljobs describe`
    control.py    `Retry` / `Snooze`: what a handler raises to steer its job
    protocols.py  `Declared` / `Deployed`: what the layers above read of an app

Built on the client layer only (docs/design/package-layers.md).
"""
