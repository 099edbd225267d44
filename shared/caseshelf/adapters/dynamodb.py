"""Index on one DynamoDB table: the single-table rows of `caseshelf.domain.keys`.

Every row is `pk`, `sk` and `doc`, the row's JSON document as a string, so arbitrary JSON
(`produced_by`, `extra`) round-trips exactly (DynamoDB numbers would turn floats into Decimals).
Dataset rows are the exception: their fields are plain attributes, because the commit updates
them in the same transaction with `if_not_exists(created_at)`. An auxiliary row's integer
`expires_at` is also copied to a top-level number, the table's TTL attribute.

`ClientError` codes are translated into domain errors here (`ConditionalCheckFailed` -> Conflict).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import orjson
from botocore.exceptions import ClientError

from caseshelf.adapters.aws import (
    RETRY_AFTER_SECONDS,
    TRANSPORT_ERRORS,
    error_code,
    is_transient,
    unavailable,
)
from caseshelf.domain import keys
from caseshelf.domain.errors import (
    BackendUnavailable,
    BadRequest,
    Conflict,
    NotFound,
    TooLarge,
    Upstream,
)
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import DatasetEntry, Page

DOC = "doc"
TTL_ATTRIBUTE = "expires_at"
# DynamoDB's item limit is 400 KB; keep room for the key attributes.
MAX_DOC_BYTES = 390 * 1024
_RETRIES = 8
# Answers that no retry mends: the deployment's table or permissions are wrong.
_MISCONFIGURED = frozenset({"ResourceNotFoundException", "AccessDeniedException"})
_ENTITY_FIELDS = ("tenant", "kind", "name", "created_at", "updated_at")
# What a call may raise that `_translate` turns into a domain error.
_FAILURES: tuple[type[Exception], ...] = (ClientError, *TRANSPORT_ERRORS)


def _code(exc: Exception) -> str:
    return error_code(exc) if isinstance(exc, ClientError) else ""


def _reasons(exc: ClientError) -> list[str]:
    return [str(r.get("Code", "None")) for r in exc.response.get("CancellationReasons", ())]


def _translate(exc: Exception, what: str) -> Exception:
    if is_transient(exc):
        return unavailable(exc, f"index row {what}", row=what)
    code = _code(exc)
    if code in _MISCONFIGURED:
        return Upstream(f"index refused {what} ({code})", row=what, fault=code)
    return exc


def _cursor_out(sk: str) -> str:
    return base64.urlsafe_b64encode(sk.encode()).decode().rstrip("=")


def _cursor_in(cursor: str, prefix: str) -> str:
    try:
        sk = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        sk = ""
    if not sk.startswith(prefix):
        raise BadRequest(f"invalid cursor {cursor!r}", field="cursor")
    return sk


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _plain(attr: dict[str, Any]) -> Any:
    """The value of a plain attribute (dataset rows hold strings only)."""
    if "S" in attr:
        return attr["S"]
    if "N" in attr:
        num = attr["N"]
        return int(num) if num.lstrip("-").isdigit() else float(num)
    if "BOOL" in attr:
        return attr["BOOL"]
    if "NULL" in attr:
        return None
    raise ValueError(f"unexpected attribute {attr!r}")


def _doc_of(raw: dict[str, Any]) -> dict[str, Any]:
    """The row's document: `doc`, with any plain attributes (a dataset row's) laid over it."""
    doc: dict[str, Any] = orjson.loads(raw[DOC]["S"]) if DOC in raw else {}
    doc.update((k, _plain(v)) for k, v in raw.items() if k not in ("pk", "sk", DOC, TTL_ATTRIBUTE))
    return doc


class DynamoIndex:
    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table

    # -- plumbing --------------------------------------------------------------------------

    def _row(self, pk: str, sk: str, doc: dict[str, Any]) -> dict[str, Any]:
        body = orjson.dumps(doc).decode()
        if len(body) > MAX_DOC_BYTES:
            raise TooLarge(
                f"index row {pk}/{sk} is {len(body)} bytes; the limit is {MAX_DOC_BYTES}"
            )
        row: dict[str, Any] = {"pk": _s(pk), "sk": _s(sk), DOC: _s(body)}
        ttl = doc.get(TTL_ATTRIBUTE)
        if isinstance(ttl, int) and not isinstance(ttl, bool):
            row[TTL_ATTRIBUTE] = {"N": str(ttl)}
        return row

    def _get_raw(self, pk: str, sk: str) -> dict[str, Any] | None:
        try:
            resp = self.client.get_item(
                TableName=self.table, Key={"pk": _s(pk), "sk": _s(sk)}, ConsistentRead=True
            )
        except _FAILURES as exc:
            raise _translate(exc, f"{pk}/{sk}") from exc
        item: dict[str, Any] | None = resp.get("Item")
        return item

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every row a query matches, paging to exhaustion."""
        start: dict[str, Any] | None = None
        while True:
            args = dict(kwargs, TableName=self.table, ConsistentRead=True)
            if start:
                args["ExclusiveStartKey"] = start
            try:
                resp = self.client.query(**args)
            except _FAILURES as exc:
                raise _translate(exc, str(kwargs.get("ExpressionAttributeValues"))) from exc
            yield from resp.get("Items", ())
            start = resp.get("LastEvaluatedKey")
            if not start:
                return

    def _replace(
        self,
        pk: str,
        sk: str,
        change: Any,
        missing: Exception,
    ) -> dict[str, Any]:
        """Read-modify-write of a `doc` row, guarded by the document it read (optimistic
        concurrency): `change(doc)` returns the new document or raises."""
        for attempt in range(_RETRIES):
            raw = self._get_raw(pk, sk)
            if raw is None:
                raise missing
            old = raw.get(DOC, {}).get("S")
            doc = change(_doc_of(raw))
            row = self._row(pk, sk, doc)
            try:
                if old is None:
                    self.client.put_item(
                        TableName=self.table,
                        Item=row,
                        ConditionExpression="attribute_exists(pk) AND attribute_not_exists(#doc)",
                        ExpressionAttributeNames={"#doc": DOC},
                    )
                else:
                    self.client.put_item(
                        TableName=self.table,
                        Item=row,
                        ConditionExpression="#doc = :old",
                        ExpressionAttributeNames={"#doc": DOC},
                        ExpressionAttributeValues={":old": _s(old)},
                    )
                return doc
            except _FAILURES as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise _translate(exc, f"{pk}/{sk}") from exc
            time.sleep(0.01 * (attempt + 1))  # someone else changed it: read again
        raise Conflict(f"index row {pk}/{sk} kept changing; try again")

    # -- versions --------------------------------------------------------------------------

    def put_version(self, rec: VersionRecord) -> None:
        pk, sk = keys.version_pk(rec.tenant, rec.kind, rec.name), keys.version_sk(rec.version)
        items = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": self._row(pk, sk, keys.record_to_item(rec)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {
                        "pk": _s(keys.tenant_pk(rec.tenant)),
                        "sk": _s(keys.entity_sk(rec.kind, rec.name)),
                    },
                    "UpdateExpression": (
                        "SET #created = if_not_exists(#created, :at), #updated = :at, "
                        "#tenant = :tenant, #kind = :kind, #name = :name"
                    ),
                    "ExpressionAttributeNames": {
                        "#created": "created_at",
                        "#updated": "updated_at",
                        "#tenant": "tenant",
                        "#kind": "kind",
                        "#name": "name",
                    },
                    "ExpressionAttributeValues": {
                        ":at": _s(rec.created_at),
                        ":tenant": _s(rec.tenant),
                        ":kind": _s(rec.kind),
                        ":name": _s(rec.name),
                    },
                }
            },
        ]
        conflict = Conflict(
            f"{rec.name}@{rec.version} already exists", id=rec.name, version=rec.version
        )
        for attempt in range(_RETRIES):
            try:
                self.client.transact_write_items(TransactItems=items)
                return
            except _FAILURES as exc:
                code = _code(exc)
                if code == "ConditionalCheckFailedException":
                    raise conflict from None
                if not isinstance(exc, ClientError) or code != "TransactionCanceledException":
                    raise _translate(exc, f"{pk}/{sk}") from exc
                reasons = _reasons(exc)
                if "ConditionalCheckFailed" in reasons:
                    raise conflict from None
                if not ({"TransactionConflict", "ThrottlingError"} & set(reasons)):
                    raise _translate(exc, f"{pk}/{sk}") from exc
            # Another transaction held one of the rows: nothing was written, so try again.
            time.sleep(0.02 * (attempt + 1))
        raise BackendUnavailable(
            f"could not commit {rec.name}@{rec.version}: the index stayed busy; nothing was "
            f"registered, try again in {RETRY_AFTER_SECONDS} s",
            retry_after=RETRY_AFTER_SECONDS,
            row=f"{pk}/{sk}",
            fault="TransactionConflict",
        )

    def get_version(self, tenant: str, kind: str, name: str, version: str) -> VersionRecord | None:
        raw = self._get_raw(keys.version_pk(tenant, kind, name), keys.version_sk(version))
        return keys.item_to_record(_doc_of(raw)) if raw else None

    def list_versions(self, tenant: str, kind: str, name: str) -> list[VersionRecord]:
        rows = self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :v)",
            ExpressionAttributeValues={
                ":pk": _s(keys.version_pk(tenant, kind, name)),
                ":v": _s(keys.version_sk("")),
            },
        )
        return [keys.item_to_record(_doc_of(r)) for r in rows]

    def update_version(
        self, tenant: str, kind: str, name: str, version: str, changes: dict[str, Any]
    ) -> VersionRecord:
        keys.check_version_changes(changes)

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            doc.update(changes)
            return doc

        doc = self._replace(
            keys.version_pk(tenant, kind, name),
            keys.version_sk(version),
            change,
            NotFound(f"no version {name}@{version}", id=name, version=version),
        )
        return keys.item_to_record(doc)

    def list_datasets(
        self, tenant: str, kind: str, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        prefix = keys.entity_prefix(kind)
        args: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)",
            "ExpressionAttributeValues": {":pk": _s(keys.tenant_pk(tenant)), ":p": _s(prefix)},
        }
        if cursor:
            args["ExclusiveStartKey"] = {
                "pk": _s(keys.tenant_pk(tenant)),
                "sk": _s(_cursor_in(cursor, prefix)),
            }
        # One row past the page tells whether another page exists, so the last page says so.
        rows: list[dict[str, Any]] = []
        while len(rows) <= limit:
            args["Limit"] = limit + 1 - len(rows)
            try:
                resp = self.client.query(**args)
            except _FAILURES as exc:
                raise _translate(exc, f"datasets of {tenant}") from exc
            rows.extend(resp.get("Items", ()))
            if not resp.get("LastEvaluatedKey"):
                break
            args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        more = len(rows) > limit
        rows = rows[:limit]
        items = []
        for raw in rows:
            d = _doc_of(raw)
            items.append(DatasetEntry(*(str(d[f]) for f in _ENTITY_FIELDS)))
        return Page(items, _cursor_out(rows[-1]["sk"]["S"]) if more and rows else None)

    def list_tenants(self) -> list[str]:
        """A full scan: for maintenance (gc), never on a request path."""
        found: set[str] = set()
        args: dict[str, Any] = {
            "TableName": self.table,
            "ProjectionExpression": "pk, sk",
            "FilterExpression": "begins_with(pk, :t)",
            "ExpressionAttributeValues": {":t": _s("T#")},
        }
        while True:
            try:
                resp = self.client.scan(**args)
            except _FAILURES as exc:
                raise _translate(exc, "tenants") from exc
            for raw in resp.get("Items", ()):
                rest = raw["pk"]["S"][2:]
                if rest and "#" not in rest:
                    found.add(rest)
            if not resp.get("LastEvaluatedKey"):
                return sorted(found)
            args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # -- auxiliary rows --------------------------------------------------------------------

    def put_item(self, pk: str, sk: str, item: dict[str, Any], *, if_absent: bool = False) -> None:
        args: dict[str, Any] = {"TableName": self.table, "Item": self._row(pk, sk, item)}
        if if_absent:
            args["ConditionExpression"] = "attribute_not_exists(pk)"
        try:
            self.client.put_item(**args)
        except _FAILURES as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise Conflict(f"item {pk}/{sk} already exists") from None
            raise _translate(exc, f"{pk}/{sk}") from exc

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        raw = self._get_raw(pk, sk)
        return _doc_of(raw) if raw else None

    def list_items(self, pk: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self._query(
            KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": _s(pk)}
        )
        return [(raw["sk"]["S"], _doc_of(raw)) for raw in rows]

    def delete_item(self, pk: str, sk: str) -> None:
        try:
            self.client.delete_item(TableName=self.table, Key={"pk": _s(pk), "sk": _s(sk)})
        except _FAILURES as exc:
            raise _translate(exc, f"{pk}/{sk}") from exc

    def update_item(
        self, pk: str, sk: str, changes: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        def change(doc: dict[str, Any]) -> dict[str, Any]:
            for k, v in (expect or {}).items():
                if doc.get(k) != v:
                    raise Conflict(f"item {pk}/{sk}: {k} is {doc.get(k)!r}, expected {v!r}")
            doc.update(changes)
            return doc

        return self._replace(pk, sk, change, NotFound(f"no item {pk}/{sk}"))
