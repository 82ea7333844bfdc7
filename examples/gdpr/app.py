"""Map each job type that carries personal data to its data subject, and the app's own
table of customers, so a subject's data can be exported and erased.

    sqljobs subjects check --app examples.gdpr.app:app          # exit 6 on a gap (CI)
    sqljobs subjects export cust-42 --app examples.gdpr.app:app
    sqljobs subjects erase cust-42 --app examples.gdpr.app:app --actor ticket-1234 --yes
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

import sqljobs

app = sqljobs.App()  # $SQLJOBS_DSN (erase: the schema owner's)

CUSTOMERS = """create table if not exists public.customers (
  id text primary key, email text, full_name text, plan text not null default 'free')"""


class Welcome(BaseModel):
    customer_id: str
    email: Annotated[str, sqljobs.PersonalData]
    full_name: Annotated[str, sqljobs.PersonalData]


@app.job(name="customers.welcome")
async def welcome(ctx: sqljobs.JobContext, mail: Welcome) -> dict[str, str]:
    await ctx.step.run_async("send", lambda: {"sent_to": mail.email})
    return {"greeting": f"Hello {mail.full_name}"}


# Whose data each job is: the payload path that names the subject.
app.subject_of(welcome, "customer_id")
# The app's own table: an erase empties the personal columns and keeps the row.
app.subject_table("public.customers", subject="id", columns=["email", "full_name"])
