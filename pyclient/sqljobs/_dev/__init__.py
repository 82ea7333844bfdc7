"""Development tools, apart from the library: the embedded PostgreSQL (`sqljobs dev`)."""
