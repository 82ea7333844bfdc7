"""sqljobs schema version 1 (the install), and the admin's read-only view of the jobs."""

from django.db import migrations, models

from sqljobs.contrib.django.migrations._revision import schema_revision


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        schema_revision(1),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("name", models.TextField()),
                ("queue", models.TextField()),
                ("tenant", models.TextField(null=True)),
                ("key", models.TextField()),
                ("state", models.TextField()),
                ("priority", models.IntegerField()),
                ("attempt", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("worker", models.TextField(null=True)),
                ("payload", models.JSONField(null=True)),
                ("progress", models.JSONField(null=True)),
                ("last_error", models.JSONField(null=True)),
                ("result", models.JSONField(null=True)),
                ("created_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
            ],
            options={"db_table": 'jobs"."job_view', "managed": False, "ordering": ["-id"]},
        ),
    ]
