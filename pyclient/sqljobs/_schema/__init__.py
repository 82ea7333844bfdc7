"""The schema's installation and upgrades: `sqljobs migrate`, the packaged SQL and
Alembic revisions, and the host-application plug-in behind `sqljobs.alembic`.

    migrate.py    apply sqljobs' own Alembic revisions to a database, standalone
    resources.py  where the packaged SQL and revisions live (wheel or checkout)
    citus.py      the guard every revision runs first (sqljobs beside Citus)
    distributed.py  `sqljobs migrate --distributed`: the queue's tables distributed on Citus

Imports nothing from the rest of sqljobs but `sqljobs._version`.
"""
