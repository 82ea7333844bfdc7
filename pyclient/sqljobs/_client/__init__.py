"""The client layer: everything that talks to the database, and nothing that runs jobs.

    queries.py       every SQL statement the package sends, as typed `Call`s
    connection.py    `Client` / `AsyncClient`: run calls on a connection or a pool
    transactions.py  run calls inside a caller's own transaction (psycopg, SQLAlchemy)
    records.py       the typed records the SQL functions answer
    errors.py        exceptions, one per SQLSTATE
    encoding.py      how a Python value becomes jsonb (results, step values)
    results.py       awaiting a job's result
    database.py      where the database is, and whether its schema version fits
    pools.py         an application's pools, opened on demand, the schema checked
    locks.py         fenced locks on named leases

It imports nothing from the rest of sqljobs but `sqljobs._version` (the layers:
docs/design/package-layers.md).
"""
