"""What the apps' hand-written SQL shares: the one way it runs (``fetch``, ``execute``),
its parameters (``adapt``) and an id list (``id_in``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from django.db import connection

# Positional (``%s``) or named (``%(as_of)s``) parameters.
Params = Sequence[Any] | Mapping[str, Any]


def adapt(value: Any) -> Any:
    """A parameter for raw SQL, through the backend's own adapters, so a value written or
    compared here matches what the ORM stores (SQLite keeps naive UTC text, PostgreSQL
    timestamptz). Anything but a datetime or date passes through."""
    if isinstance(value, datetime):
        return connection.ops.adapt_datetimefield_value(value)
    if isinstance(value, date):
        return connection.ops.adapt_datefield_value(value)
    return value


def fetch(sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
    """Run one statement on Django's connection (so in the caller's transaction), its
    parameters adapted; return its rows (none for a statement that returns none)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, _adapted(params))
        return list(cursor.fetchall()) if _returned_rows(cursor) else []


def _returned_rows(cursor: Any) -> bool:
    """Whether the statement returned a result set (even an empty one). psycopg builds a
    Column object per column for ``description``, about a sixth of the client's CPU for
    the claim every order makes; its result's status says the same for nothing."""
    result = getattr(cursor, "pgresult", None)
    if result is not None:
        from psycopg.pq import ExecStatus

        return bool(result.status == ExecStatus.TUPLES_OK)
    return cursor.description is not None


def execute(sql: str, params: Params = ()) -> int:
    """Run one statement as ``fetch`` does; return how many rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, _adapted(params))
        return max(int(cursor.rowcount), 0)


def id_in(column: str, ids: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column`` is one of ``ids`` (ids or names): one array parameter on PostgreSQL, a
    list on SQLite (it has no arrays). A batch passes thousands of ids; as as many placeholders,
    PostgreSQL spent about twice as long parsing and planning a delete as running it."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [list(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)


def _adapted(params: Params) -> Params:
    if connection.vendor == "postgresql":
        return params  # psycopg adapts datetimes and dates itself, as the ORM's adapters do there
    if isinstance(params, Mapping):
        return {name: adapt(value) for name, value in params.items()}
    return [adapt(value) for value in params]
