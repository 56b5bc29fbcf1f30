"""What the apps' hand-written SQL shares: the one way it runs (``fetch``, ``execute``,
on ``default_connection`` where a hot path reads the connection often), its parameters
(``adapt``), an id list (``id_in``, ``int_array``, and ``AnyOf`` for the ORM), rows read
back as model instances (``columns_of``, ``instances_from_rows``), and JIT turned off for
a transaction (``jit_off``)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Lookup

ModelT = TypeVar("ModelT", bound=models.Model)

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


def default_connection() -> BaseDatabaseWrapper:
    """Django's default connection itself, not the ``django.db.connection`` proxy, for a
    hot path that reads it many times: each attribute read through the proxy is a
    thread-local lookup."""
    return connections[DEFAULT_DB_ALIAS]


def fetch(sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
    """Run one statement on Django's connection (so in the caller's transaction), its
    parameters adapted; return its rows (none for a statement that returns none)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, _adapted(params))
        return list(cursor.fetchall()) if _returned_rows(cursor) else []


def _returned_rows(cursor: Any) -> bool:
    """Whether the statement returned a result set (even an empty one). psycopg builds a
    Column object per column for ``description`` (on the claim every order makes); its
    result's status says the same for nothing."""
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


def jit_off() -> None:
    """Turn PostgreSQL's JIT off for the rest of the caller's transaction (SET LOCAL; it
    must be in one). For statements the planner costs far past ``jit_above_cost`` though
    they stop after a batch or probe an index per row: JIT would compile them for longer
    than they run (docs/benchmark-history.md). Nothing to do on SQLite."""
    if connection.vendor == "postgresql":
        execute("SET LOCAL jit = off")


def id_in(column: str, ids: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column`` is one of ``ids`` (ids or names): one array parameter on PostgreSQL, a
    list on SQLite (it has no arrays): a batch passes thousands of ids, and as that many
    placeholders PostgreSQL would spend longer parsing and planning than running.
    Integer ids go as one ``int_array`` literal."""
    return _id_in(column, ids, vendor=connection.vendor)


def _id_in(column: str, ids: Sequence[Any], *, vendor: str) -> tuple[str, list[Any]]:
    if vendor == "postgresql":
        if ids and all(isinstance(value, int) for value in ids):
            return f"{column} = ANY(%s::bigint[])", [int_array(ids)]
        return f"{column} = ANY(%s)", [list(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)


def int_array(values: Iterable[int | None]) -> str:
    """A PostgreSQL array literal of integers (None as NULL), ``{1,2,NULL}``, for a
    ``%s::bigint[]`` parameter, because psycopg dumps a Python list element by element, in
    Python (docs/benchmark-history.md). ``int()`` refuses anything but an integer, and the
    literal is a bound parameter."""
    return "{" + ",".join("NULL" if value is None else str(int(value)) for value in values) + "}"


class AnyOf(Lookup):  # type: ignore[type-arg]  # (generic in the stubs only)
    """``AnyOf(F("id"), ids)`` in ``filter()``: the column is one of ``ids`` (integers),
    as ``id__in`` but as one array parameter on PostgreSQL. ``id__in`` prepares every id
    through the field and writes a placeholder each, which psycopg then re-parses
    (docs/benchmark-history.md). The condition is ``id_in``'s."""

    lookup_name = "any_of"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: BaseDatabaseWrapper) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        condition, params = _id_in(lhs, [int(value) for value in self.rhs], vendor=connection.vendor)
        return condition, [*lhs_params, *params]


def columns_of(model: type[models.Model], *, without_pk: bool = False) -> str:
    """Every concrete column of ``model`` in field order, quoted: a ``RETURNING`` list that
    ``instances_from_rows`` reads; ``without_pk``, all but the primary key's (an INSERT's
    column list, the id left to its default)."""
    fields = [field for field in model._meta.concrete_fields if not (without_pk and field.primary_key)]
    return ", ".join(connection.ops.quote_name(field.column) for field in fields)


def instances_from_rows(model: type[ModelT], rows: Sequence[Sequence[Any]]) -> list[ModelT]:
    """Instances of ``model`` from rows holding every concrete column in field order
    (``columns_of``), each value converted as the ORM converts it when it reads the field
    (dates from SQLite's text, JSON), so an instance read here equals one read through a
    queryset, without the queryset's per-call work of resolving columns and converters."""
    conn = default_connection()
    names = [field.attname for field in model._meta.concrete_fields]
    converters = _converters(model, conn)
    instances = []
    for row in rows:
        values = list(row)
        for index, converter, column in converters:
            values[index] = converter(values[index], column, conn)
        instances.append(model.from_db(conn.alias, names, values))
    return instances


def instance_created(model: type[ModelT], pk: Any, given: Mapping[str, Any]) -> ModelT:
    """The row a hand-written INSERT wrote as ``pk`` from ``given`` (attnames), as
    ``model.objects.create(**given)`` returns it: the values as given, every other column at
    its default, saved in the default database. Cheaper than reading the row back."""
    conn = default_connection()
    fields = model._meta.concrete_fields
    values = [
        pk if field.primary_key else given[field.attname] if field.attname in given else field.get_default()
        for field in fields
    ]
    return model.from_db(conn.alias, [field.attname for field in fields], values)


# Per connection (each thread has its own) and model: the converters of the model's
# columns, which cost five times the rest of instances_from_rows to look up.
_CONVERTERS: weakref.WeakKeyDictionary[Any, dict[type[models.Model], list[tuple[int, Any, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def _converters(model: type[models.Model], conn: BaseDatabaseWrapper) -> list[tuple[int, Any, Any]]:
    """(column index, converter, column) for every column of ``model`` the ORM converts on
    read from ``conn``."""
    ops = conn.ops
    per_model = _CONVERTERS.setdefault(ops, {})
    if model not in per_model:
        found = []
        for index, field in enumerate(model._meta.concrete_fields):
            column = field.get_col(model._meta.db_table)
            for converter in ops.get_db_converters(column) + column.get_db_converters(conn):
                found.append((index, converter, column))
        per_model[model] = found
    return per_model[model]


def _adapted(params: Params) -> Params:
    if connection.vendor == "postgresql":
        return params  # psycopg adapts datetimes and dates itself, as the ORM's adapters do there
    if isinstance(params, Mapping):
        return {name: adapt(value) for name, value in params.items()}
    return [adapt(value) for value in params]
