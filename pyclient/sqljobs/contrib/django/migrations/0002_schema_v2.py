"""sqljobs schema version 2."""

from django.db import migrations

from sqljobs.contrib.django.migrations._revision import schema_revision


class Migration(migrations.Migration):
    dependencies = [("sqljobs", "0001_schema_v1")]
    operations = [schema_revision(2)]
