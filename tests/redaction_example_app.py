"""An app whose payloads hold secrets, for the redaction tests (in-process and as
`sqljobs worker tests.redaction_example_app:app --queue secure`).

`secure.charge` records what its handler saw in `public.redaction_seen` (the tests
create it): the handler must get the real values. With `fail` it raises an error that
quotes the card number and the password, as careless code does.
"""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
from pydantic import BaseModel, SecretStr, StringConstraints

from sqljobs import App, JobContext, PersonalData, RetryPolicy, Sensitive

QUEUE = "secure"
SEEN_TABLE = """
create table if not exists public.redaction_seen (
  job_id        bigint not null,
  password      text not null,
  password_type text not null,
  number        text not null,
  ssns          text[] not null
)
"""

# The values no view, log line or error may show.
PASSWORD = "hunter2-very-secret"
CARD = "4111111111111111"
SSN = "078-05-1120"
SECRETS = (PASSWORD, CARD, SSN)


class Card(BaseModel):
    number: Annotated[str, Sensitive]
    holder: Annotated[str, PersonalData]


class Item(BaseModel):
    sku: str
    ssn: Annotated[str | None, Sensitive] = None


class Charge(BaseModel):
    password: SecretStr
    card: Card
    items: list[Item] = []
    email: Annotated[str, PersonalData] = ""
    fail: bool = False


class Pin(BaseModel):
    pin: SecretStr
    code: Annotated[str, Sensitive, StringConstraints(pattern=r"^[0-9]{4}$")]


def charge_payload(fail: bool = False) -> dict[str, Any]:
    return {"password": PASSWORD, "card": {"number": CARD, "holder": "Ann Example"},
            "items": [{"sku": "A-1", "ssn": SSN}], "email": "ann@example.com", "fail": fail}


def make_app(dsn: str | None = None) -> App:
    app = App(dsn)

    @app.job(name="secure.charge", queue=QUEUE, retry=RetryPolicy(max_attempts=1),
             timeout=30)
    def charge(ctx: JobContext, payload: Charge) -> dict[str, Any]:
        secret = payload.password
        with psycopg.connect(app.dsn, autocommit=True) as conn:
            conn.execute("insert into public.redaction_seen values (%s, %s, %s, %s, %s)",
                         (ctx.job_id, secret.get_secret_value(), type(secret).__name__,
                          payload.card.number, [i.ssn or "" for i in payload.items]))
        if payload.fail:
            raise ValueError(f"card {payload.card.number} declined for password "
                             f"{secret.get_secret_value()}")
        return {"charged": True, "echo": payload.card.number}

    @app.job(name="secure.pin", queue=QUEUE, retry=RetryPolicy(max_attempts=1))
    def pin(ctx: JobContext, payload: Pin) -> None:
        return None

    return app


app = make_app()
