def test_version(conn):
    assert conn.execute("select jobs.schema_version()").fetchone()[0] == 1
