"""Versions the client knows about."""

# The schema version this client needs: what `jobs.schema_version()` answers once the
# Alembic revision shipped with this release is applied.
SCHEMA_VERSION = 1

# The Alembic revision that installs SCHEMA_VERSION (migrations/versions/).
SCHEMA_REVISION = "sqljobs_0001"
