"""`Job`: the jobs as `jobs.job_view` shows them (redacted), read-only, for the admin.

The view is the engine's public read side; the model is unmanaged, so Django never
writes a table for it. Every change to a job goes through the engine's functions (the
`sqljobs` command, `jobs.cancel(...)`), never through this model. A job's run_at is
left out: a parked job without a wake-up time has run_at = infinity, which Python's
datetime cannot hold.
"""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    id = models.BigIntegerField(primary_key=True)
    name = models.TextField()
    queue = models.TextField()
    tenant = models.TextField(null=True)
    key = models.TextField()
    state = models.TextField()
    priority = models.IntegerField()
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    worker = models.TextField(null=True)
    payload = models.JSONField(null=True)
    progress = models.JSONField(null=True)
    last_error = models.JSONField(null=True)
    result = models.JSONField(null=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'jobs"."job_view'  # Django quotes it as "jobs"."job_view"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"#{self.id} {self.name} ({self.state})"
