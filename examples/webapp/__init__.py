"""A FastAPI app that enqueues a job inside its request's transaction."""
