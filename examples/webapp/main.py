"""A FastAPI app that enqueues a job in the same transaction as its own write.

    pip install 'sqljobs[examples]'
    export SQLJOBS_DSN=postgresql://postgres@127.0.0.1:5432/app   # or: "$(sqljobs dev dsn)"
    sqljobs migrate
    uvicorn examples.webapp.main:create_app --factory             # serves on :8000
    curl -s -X POST localhost:8000/signups -H 'content-type: application/json' \
         -d '{"email": "ada@example.com"}'
    sqljobs worker examples.webapp.jobs:app                      # runs the welcome mails

`POST /signups` inserts a row in `signup` and enqueues `examples.send_welcome` through
the request's SQLAlchemy session (`conn=session`): the signup and its job commit
together, or neither exists. An email at `@invalid.example` makes the handler fail
AFTER the enqueue, to show the rollback taking the job with it.
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoint's annotations
# at run time, and `session` below is local to create_app.
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from examples.webapp.jobs import Welcome, send_welcome
from sqljobs.alembic import sqlalchemy_url


class Base(DeclarativeBase):
    pass


class Signup(Base):
    __tablename__ = "signup"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)


class SignupIn(BaseModel):
    email: str


class SignupOut(BaseModel):
    id: int
    job_id: int
    job_outcome: str


def create_app(dsn: str | None = None) -> FastAPI:
    """The app, on `dsn` (default: $SQLJOBS_DSN, then $DATABASE_URL)."""
    dsn = dsn or os.environ.get("SQLJOBS_DSN") or os.environ["DATABASE_URL"]
    # Any libpq DSN as a SQLAlchemy URL on the psycopg 3 driver (postgresql+psycopg://).
    engine = create_engine(sqlalchemy_url(dsn))
    Base.metadata.create_all(engine)
    sessions = sessionmaker(engine)

    def session() -> Iterator[Session]:
        with sessions() as s:  # closing without commit rolls back
            yield s

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    api = FastAPI(title="sqljobs example", lifespan=lifespan)

    @api.post("/signups", status_code=201)
    def create_signup(body: SignupIn,
                      db: Annotated[Session, Depends(session)]) -> SignupOut:
        signup = Signup(email=body.email)
        db.add(signup)
        db.flush()  # the signup's id, inside the open transaction
        job = send_welcome.enqueue(
            Welcome(signup_id=signup.id, email=body.email),
            key=f"signup:{signup.id}:welcome",
            conn=db,  # the job is written in this request's transaction
        )
        if body.email.endswith("@invalid.example"):
            # Anything failing after the enqueue rolls back the signup AND its job.
            raise HTTPException(422, "this address cannot receive mail")
        db.commit()
        return SignupOut(id=signup.id, job_id=job.id, job_outcome=job.outcome)

    return api
