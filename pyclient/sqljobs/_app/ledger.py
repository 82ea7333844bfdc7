"""`app.ledger(...)`: double-entry postings, each written whole in ONE durable step.

A posting is a key and its lines (account, currency, amount: debits positive, credits
negative) that sum to zero in each currency. It is written by `jobs.ledger_post` (sql/
87_integrations.sql) inside one durable step of a job, fenced on the job's claim:

- balanced per currency, else `LedgerUnbalanced` (SJ053): checked here before anything
  is enqueued, and again in SQL, where nothing is written;
- the key is unique per (ledger, tenant): a step that runs again after a crash (the
  posting committed, the step's value not yet stored) posts the same lines under the
  same key and gets the posting already written, so a retried job posts ONCE;
- the same key with other lines is refused, `LedgerPostingConflict` (SJ054), terminal.

Two ways to post: `ledger.post(key, lines)` enqueues the ledger's own job (named like
the ledger, keyed by the posting key and a digest of its lines: the same posting sent
twice is one job, the same key with other lines a second job that fails with the
conflict); `await ledger.post_in(ctx, key, lines)` posts from inside any job's handler,
as its durable step `ledger:<name>:<key>`. Balances are read per account
(`ledger.balances()`), amounts are `Decimal`s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import psycopg
from pydantic import BaseModel, Field

from sqljobs._client import queries
from sqljobs._client.connection import AsyncClient
from sqljobs._client.errors import (
    ConfigurationError,
    InvalidArgument,
    LedgerPostingConflict,
    LedgerUnbalanced,
)
from sqljobs._client.records import Enqueued, LedgerBalance, LedgerLine
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle, RetryPolicy

LineLike = Mapping[str, Any] | tuple[str, str, Any]


class Line(BaseModel):
    """One line of a posting: a debit (amount > 0) or a credit (amount < 0)."""

    account: str = Field(min_length=1, max_length=200)
    currency: str = Field(pattern=r"^[A-Z0-9]{3,12}$")
    amount: Decimal


class Posting(BaseModel):
    """The payload of a ledger's job: one posting."""

    key: str = Field(min_length=1, max_length=200)
    lines: list[Line] = Field(min_length=2, max_length=1000)
    memo: str | None = None


def _amount(value: Any) -> Decimal:
    if isinstance(value, float):
        raise InvalidArgument("ledger amounts are Decimal, int or decimal strings, not float")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise InvalidArgument(f"{value!r} is not a decimal amount") from None
    if not amount.is_finite() or amount == 0:
        raise InvalidArgument(f"an amount must be finite and non-zero, not {value!r}")
    return amount


def lines_of(lines: Iterable[LineLike]) -> list[Line]:
    """The posting's lines, checked: each a mapping {account, currency, amount} or a
    tuple (account, currency, amount); balanced per currency (LedgerUnbalanced)."""
    checked: list[Line] = []
    for n, raw in enumerate(lines, 1):
        try:
            if isinstance(raw, tuple):
                account, currency, amount = raw
            else:
                account, currency, amount = raw["account"], raw["currency"], raw["amount"]
            checked.append(Line(account=account, currency=currency, amount=_amount(amount)))
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgument(f"line {n} of the posting: {error}") from None
    if not 2 <= len(checked) <= 1000:
        raise InvalidArgument("a posting has 2 to 1000 lines")
    totals: dict[str, Decimal] = {}
    for line in checked:
        totals[line.currency] = totals.get(line.currency, Decimal(0)) + line.amount
    off = {c: t for c, t in sorted(totals.items()) if t != 0}
    if off:
        raise LedgerUnbalanced(
            "the posting does not balance: " + ", ".join(f"{c} {t}" for c, t in off.items()),
            hint="the amounts of each currency must sum to zero (debits > 0, credits < 0)")
    return checked


def _wire(lines: Sequence[Line]) -> list[dict[str, str]]:
    return [{"account": x.account, "currency": x.currency, "amount": str(x.amount)}
            for x in lines]


def digest(lines: Sequence[Line]) -> str:
    """The same lines in any order (and 1.0 = 1.00) give the same digest."""
    canonical = sorted((x.account, x.currency, str(x.amount.normalize())) for x in lines)
    return hashlib.sha256(json.dumps(canonical).encode()).hexdigest()[:16]


class Host(ClientSource, Protocol):
    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            retry: RetryPolicy | None = ..., timeout: float | None = ...,
            terminal: tuple[type[BaseException], ...] = ...,
            payload: type[BaseModel] | None = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


TERMINAL = (LedgerUnbalanced, LedgerPostingConflict, InvalidArgument)


class LedgerHandle:
    """What `app.ledger` returns: post (as its own job, or inside another), read."""

    def __init__(self, app: Host, name: str) -> None:
        self.app, self.name = app, name
        self.job: JobHandle[Posting]

    def _step_name(self, key: str) -> str:
        name = f"ledger:{self.name}:{key}"
        if len(name.encode()) <= 200:
            return name
        return f"ledger:{self.name}:#{hashlib.sha256(key.encode()).hexdigest()[:32]}"

    async def post_in(self, ctx: Any, key: str, lines: Iterable[LineLike], *,
                      memo: str | None = None) -> dict[str, Any]:
        """Post from inside a job's handler, as ONE durable step: answers
        {"posting_id", "created"} (created False: the key's posting was already written
        with these lines, by an earlier run of this step or another job)."""
        checked = lines_of(lines)
        wire = _wire(checked)
        call = queries.ledger_post(ctx.job_id, ctx.claim, self.name, key, wire, memo)

        async def post() -> dict[str, Any]:
            if ctx.has_engine:
                return await ctx.engine_call(call)  # type: ignore[no-any-return]
            async with await psycopg.AsyncConnection.connect(self.app.dsn,
                                                             autocommit=True) as conn:
                return await AsyncClient(conn).run(call)

        return await ctx.step.run_async(self._step_name(key), post)  # type: ignore[no-any-return]

    def post(self, key: str, lines: Iterable[LineLike], *, memo: str | None = None,
             tenant: str | None = None, conn: Any = None, **options: Any) -> Enqueued:
        """Enqueue the posting as the ledger's job (LedgerUnbalanced / InvalidArgument
        before anything is written). Its job key is the posting key and a digest of the
        lines: the same posting twice is the same job."""
        checked = lines_of(lines)
        payload = Posting(key=key, lines=checked, memo=memo)
        return self.job.enqueue(payload, key=f"{key}#{digest(checked)}", tenant=tenant,
                                conn=conn, **options)

    async def post_async(self, key: str, lines: Iterable[LineLike], *,
                         memo: str | None = None, tenant: str | None = None,
                         conn: Any = None, **options: Any) -> Enqueued:
        """`post` for asyncio code."""
        checked = lines_of(lines)
        payload = Posting(key=key, lines=checked, memo=memo)
        return await self.job.enqueue_async(payload, key=f"{key}#{digest(checked)}",
                                            tenant=tenant, conn=conn, **options)

    def balances(self, account: str | None = None) -> list[LedgerBalance]:
        """Every account's balance per currency (and tenant), or one account's."""
        return self.app.client.run(queries.ledger_balances(self.name, account))

    def balance(self, account: str, currency: str, *, tenant: str | None = None) -> Decimal:
        """One account's balance in one currency (0 when it has no line)."""
        for row in self.balances(account):
            if row.currency == currency and row.tenant == tenant:
                return row.balance
        return Decimal(0)

    def posting(self, key: str, *, tenant: str | None = None) -> list[LedgerLine]:
        """The lines of the posting `key` (none: [])."""
        return self.app.client.run(queries.ledger_posting(self.name, key, tenant))


def declare_ledger(app: Host, name: str, *, queue: str | None, retry: RetryPolicy | None,
                   timeout: float | None) -> LedgerHandle:
    if not name or len(name.encode()) > 100:
        raise ConfigurationError("a ledger name is 1 to 100 bytes")
    handle = LedgerHandle(app, name)

    async def run(ctx: Any, posting: Posting) -> dict[str, Any]:
        return await handle.post_in(ctx, posting.key, [
            (x.account, x.currency, x.amount) for x in posting.lines], memo=posting.memo)

    run.__qualname__ = f"ledger[{name}]"
    handle.job = app.job(name=name, queue=queue, retry=retry, timeout=timeout,
                         payload=Posting, terminal=TERMINAL)(run)
    return handle


__all__ = ["LedgerHandle", "Line", "Posting", "declare_ledger", "digest", "lines_of"]
