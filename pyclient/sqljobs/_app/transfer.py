"""`app.export_rows(...)` and `app.import_rows(...)`: rows to and from storage URLs,
each an ordinary job, durable per page. Storage is reached through fsspec (the `files`
extra: `pip install 'sqljobs[files]'`): `file://` paths in tests, `s3://`, `gs://`,
`az://` ... in production with the matching fsspec package.

Export: a keyset walk of a query; each page is written as ONE object named by its page
index (`<url>/part-000001.jsonl`) in the durable step `page-<n>`, which stores only the
cursor after it. A crash re-writes at most the page in hand, under the same name.

Import: a CSV (header line first) or JSON-lines file read in pages of at most
`page_bytes` bytes, cut at the last record boundary; the durable step `page-<n>` parses
the page, hands the valid records to the handler (at least once per page) and stores
the BYTE OFFSET where the next page starts, with the page's refusals: their line, byte
offset, field and reason, never their values.

Tenants: a job of a tenant exports only its tenant's rows (`tenant_column`) and
imports only records of its tenant (`tenant_field`; others are refused); `{tenant}` in
a URL is the job's tenant. A declaration that names a tenant column refuses to run in
a job of no tenant.
"""

from __future__ import annotations

import csv
import inspect
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from pydantic import BaseModel, ValidationError

from sqljobs._client.errors import ConfigurationError, SqljobsError
from sqljobs._client.transactions import ClientSource
from sqljobs._declare.jobs import JobHandle

Format = Literal["csv", "jsonl"]
MAX_REPORTED = 100  # refusals located per run (the counts are always whole)


class Host(ClientSource, Protocol):
    @property
    def dsn(self) -> str: ...

    def job(self, *, name: str | None = ..., queue: str | None = ...,
            timeout: float | None = ..., payload: type[BaseModel] | None = ...,
            terminal: tuple[type[BaseException], ...] = ...,
            ) -> Callable[[Callable[..., Any]], JobHandle[Any]]: ...


class TransferRefused(SqljobsError):
    """An export or import that may not run as asked (a tenant-scoped one in a job of no
    tenant, a record larger than the declared limit): the job fails at once."""


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError:  # pragma: no cover - the extra is part of the test install
        raise ConfigurationError(
            "exports and imports need fsspec: pip install 'sqljobs[files]'") from None
    return fsspec


def _url(template: str, tenant: str | None) -> str:
    if "{tenant}" in template:
        if tenant is None:
            raise TransferRefused(f"{template} names {{tenant}}, and this job has no tenant")
        return template.replace("{tenant}", tenant)
    return template


class Transfer(BaseModel):
    """The payload of an export or import job: the storage URL (default: the declared one)."""

    url: str = ""


# -- export ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Export:
    name: str
    source: str
    key: tuple[str, ...]
    url: str
    format: Format = "jsonl"
    page: int = 1000
    tenant_column: str | None = None

    def __post_init__(self) -> None:
        if not self.key:
            raise ConfigurationError(f"export {self.name!r} needs key= (its keyset columns)")
        if not 1 <= self.page <= 1_000_000:
            raise ConfigurationError(f"export {self.name!r}: page must be 1..1000000 rows")
        if self.format not in ("csv", "jsonl"):
            raise ConfigurationError(f"export {self.name!r}: format is csv or jsonl")

    def page_query(self, after: bool) -> sql.Composed:
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.key)
        conditions: list[sql.Composable] = []
        if self.tenant_column is not None:
            conditions.append(sql.SQL("{} = %(tenant)s").format(
                sql.Identifier(self.tenant_column)))
        if after:
            conditions.append(sql.SQL("({keys}) > ({values})").format(
                keys=keys, values=sql.SQL(", ").join(
                    sql.Placeholder(f"sqljobs_c{i}") for i in range(len(self.key)))))
        where = (sql.SQL(" where ") + sql.SQL(" and ").join(conditions)) if conditions \
            else sql.SQL("")
        return sql.SQL("select * from ({source}) as sqljobs_export{where} "
                       "order by {keys} limit {limit}").format(
            source=sql.SQL(self.source), where=where, keys=keys, limit=sql.Literal(self.page))

    def encode(self, rows: list[dict[str, Any]]) -> bytes:
        if self.format == "jsonl":
            return "".join(json.dumps(r, default=str) + "\n" for r in rows).encode()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().encode()


def declare_export(app: Host, export: Export, *, queue: str | None,
                   timeout: float | None) -> JobHandle[Transfer]:
    async def run(ctx: Any, transfer: Transfer) -> dict[str, Any]:
        if export.tenant_column is not None and ctx.tenant is None:
            raise TransferRefused(f"export {export.name} is per tenant; this job has none")
        base = _url(transfer.url or export.url, ctx.tenant).rstrip("/")
        fs, root = _fsspec().core.url_to_fs(base)
        cursor: Any = None
        number = rows_total = pages = 0
        async with await psycopg.AsyncConnection.connect(app.dsn, autocommit=True) as conn:
            while True:
                number += 1

                async def page(n: int = number, at: Any = cursor) -> dict[str, Any]:
                    params: dict[str, Any] = {"tenant": ctx.tenant}
                    if at is not None:
                        params.update({f"sqljobs_c{i}": v for i, v in enumerate(at)})
                    async with conn.cursor(row_factory=dict_row) as cur:
                        await cur.execute(export.page_query(at is not None), params)
                        rows = await cur.fetchall()
                    if not rows:
                        return {"cursor": at, "rows": 0}
                    fs.makedirs(root, exist_ok=True)
                    with fs.open(f"{root}/part-{n:06d}.{export.format}", "wb") as out:
                        out.write(export.encode(rows))
                    last = json.loads(json.dumps([rows[-1][k] for k in export.key], default=str))
                    return {"cursor": last, "rows": len(rows)}

                done = await ctx.step.run_async(f"page-{number}", page)
                cursor = done["cursor"]
                rows_total += done["rows"]
                pages += 1 if done["rows"] else 0
                if done["rows"] < export.page:
                    break
        return {"url": base, "pages": pages, "rows": rows_total}

    run.__qualname__ = f"export[{export.name}]"
    return app.job(name=export.name, queue=queue, timeout=timeout, payload=Transfer,
                   terminal=(TransferRefused,))(run)


# -- import ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImportPage:
    """What an import's handler gets: one page's valid records (at least once)."""

    records: list[Any]   # dicts, or instances of the declared model
    number: int
    offset: int          # the byte offset the page starts at
    ctx: Any             # the job's JobContext


@dataclass(frozen=True)
class Import:
    name: str
    handle: Callable[[ImportPage], Any]
    url: str = ""
    format: Format = "csv"
    page_bytes: int = 1 << 20
    max_record_bytes: int = 64 << 10
    model: type[BaseModel] | None = None
    tenant_field: str | None = None

    def __post_init__(self) -> None:
        if self.format not in ("csv", "jsonl"):
            raise ConfigurationError(f"import {self.name!r}: format is csv or jsonl")
        if self.max_record_bytes < 1:
            raise ConfigurationError(f"import {self.name!r}: max_record_bytes must be >= 1")
        if self.page_bytes < self.max_record_bytes:
            raise ConfigurationError(
                f"import {self.name!r}: page_bytes ({self.page_bytes}) is smaller than "
                f"max_record_bytes ({self.max_record_bytes}): a record could fit no page")


def _refusal(line: int, offset: int, reason: str, field: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"line": line, "byte": offset, "reason": reason}
    if field is not None:
        found["field"] = field
    return found


def parse_page(spec: Import, data: bytes, offset: int, line: int, header: list[str] | None,
               tenant: str | None) -> tuple[list[Any], list[dict[str, Any]], int, int]:
    """The valid records of one page, its refusals (located, no values), and the byte
    offset and line number after it. `data` ends at a record boundary."""
    records: list[Any] = []
    refused: list[dict[str, Any]] = []
    at = offset
    for raw in data.splitlines(keepends=True):
        line += 1
        here, at = at, at + len(raw)
        text = raw.rstrip(b"\r\n")
        if not text.strip():
            continue
        if len(raw) > spec.max_record_bytes:
            refused.append(_refusal(line, here, "record larger than max_record_bytes"))
            continue
        try:
            if spec.format == "jsonl":
                value = json.loads(text)
                if not isinstance(value, dict):
                    refused.append(_refusal(line, here, "not a JSON object"))
                    continue
            else:
                cells = next(csv.reader([text.decode()]))
                assert header is not None
                if len(cells) != len(header):
                    refused.append(_refusal(line, here, f"{len(cells)} fields, the header has "
                                                        f"{len(header)}"))
                    continue
                value = dict(zip(header, cells, strict=True))
        except (ValueError, csv.Error, UnicodeDecodeError):
            refused.append(_refusal(line, here, "not " + ("JSON" if spec.format == "jsonl"
                                                          else "CSV")))
            continue
        if spec.tenant_field is not None and str(value.get(spec.tenant_field)) != str(tenant):
            refused.append(_refusal(line, here, "another tenant's record", spec.tenant_field))
            continue
        if spec.model is not None:
            try:
                value = spec.model.model_validate(value)
            except ValidationError as error:
                first = error.errors(include_url=False, include_input=False,
                                     include_context=False)[0]
                refused.append(_refusal(line, here, first["type"],
                                        ".".join(map(str, first["loc"])) or None))
                continue
        records.append(value)
    return records, refused, at, line


def declare_import(app: Host, spec: Import, *, queue: str | None,
                   timeout: float | None) -> JobHandle[Transfer]:
    async def run(ctx: Any, transfer: Transfer) -> dict[str, Any]:
        if spec.tenant_field is not None and ctx.tenant is None:
            raise TransferRefused(f"import {spec.name} is per tenant; this job has none")
        url = _url(transfer.url or spec.url, ctx.tenant)
        if not url:
            raise TransferRefused(f"import {spec.name}: no URL declared or given")
        fs, path = _fsspec().core.url_to_fs(url)

        def read(offset: int, size: int) -> bytes:
            with fs.open(path, "rb") as f:
                f.seek(offset)
                return bytes(f.read(size))

        async def header() -> dict[str, Any]:
            if spec.format != "csv":
                return {"columns": None, "offset": 0}
            first = read(0, spec.max_record_bytes + 1)
            end = first.find(b"\n")
            if end < 0 and len(first) > spec.max_record_bytes:
                raise TransferRefused(f"import {spec.name}: the header line is larger than "
                                      f"max_record_bytes")
            end = len(first) if end < 0 else end + 1
            columns = next(csv.reader([first[:end].decode().rstrip("\r\n")]))
            return {"columns": columns, "offset": end}

        head = await ctx.step.run_async("header", header)
        offset, line = head["offset"], 1 if spec.format == "csv" else 0
        number = accepted = refused_count = 0
        located: list[dict[str, Any]] = []
        while True:
            number += 1

            async def page(n: int = number, at: int = offset, ln: int = line) -> dict[str, Any]:
                data = read(at, spec.page_bytes + 1)
                if not data:
                    return {"offset": at, "line": ln, "accepted": 0, "refused": [],
                            "refused_count": 0, "end": True}
                end = len(data) <= spec.page_bytes
                chunk = data if end else data[:spec.page_bytes]
                if not end:
                    cut = chunk.rfind(b"\n")
                    if cut < 0:  # one record longer than a page: skip to its end
                        skip = at
                        while True:
                            more = read(skip, spec.page_bytes)
                            nl = more.find(b"\n")
                            if nl >= 0 or not more:
                                skip += (nl + 1) if nl >= 0 else len(more)
                                break
                            skip += len(more)
                        return {"offset": skip, "line": ln + 1, "accepted": 0,
                                "refused": [_refusal(ln + 1, at,
                                                     "record larger than max_record_bytes")],
                                "refused_count": 1, "end": not more}
                    chunk = chunk[:cut + 1]
                records, refusals, after, ln_after = parse_page(
                    spec, chunk, at, ln, head["columns"], ctx.tenant)
                if records:
                    handled = spec.handle(ImportPage(records, n, at, ctx))
                    if inspect.isawaitable(handled):
                        await handled
                return {"offset": after, "line": ln_after, "accepted": len(records),
                        "refused": refusals[:MAX_REPORTED], "refused_count": len(refusals),
                        "end": end}

            done = await ctx.step.run_async(f"page-{number}", page)
            offset, line = done["offset"], done["line"]
            accepted += done["accepted"]
            refused_count += done["refused_count"]
            located.extend(done["refused"][:MAX_REPORTED - len(located)])
            if done["end"]:
                break
        return {"url": url, "pages": number, "accepted": accepted,
                "refused": refused_count, "errors": located}

    run.__qualname__ = f"import[{spec.name}]"
    return app.job(name=spec.name, queue=queue, timeout=timeout, payload=Transfer,
                   terminal=(TransferRefused,))(run)


__all__ = ["Export", "Import", "ImportPage", "Transfer", "TransferRefused", "declare_export",
           "declare_import", "parse_page"]
