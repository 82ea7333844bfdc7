"""sqljobs schema version 3."""

from django.db import migrations

from sqljobs.contrib.django.migrations._revision import schema_revision


class Migration(migrations.Migration):
    dependencies = [("sqljobs", "0002_schema_v2")]
    operations = [schema_revision(3)]
