"""Versions the client knows about."""

# The schema version this client needs: what `jobs.schema_version()` answers once the
# newest revision shipped with this release is applied (migrations/versions/).
SCHEMA_VERSION = 3

# The Alembic revision that brings the schema to SCHEMA_VERSION.
SCHEMA_REVISION = "sqljobs_0003"
