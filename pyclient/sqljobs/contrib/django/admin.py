"""A read-only admin of the jobs: list, filter, search and look, never change.

To retry, cancel or remove a job use the engine's operations (`manage.py sqljobs jobs
retry ID`, the dashboard, `jobs.requeue(...)`): they keep the job's invariants, which a
row edit would not.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from sqljobs.contrib.django.models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "queue", "state", "attempt", "created_at", "finished_at")
    list_filter = ("state", "queue")
    search_fields = ("name", "key")
    readonly_fields = tuple(field.name for field in Job._meta.fields)
    show_full_result_count = False  # a count(*) over every job on each page is costly

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
