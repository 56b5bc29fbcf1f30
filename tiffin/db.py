"""What the apps' hand-written SQL shares: the one way it runs (``fetch``, ``execute``,
on ``default_connection`` where a hot path reads the connection often), its parameters
(``adapt``, ``array``, ``json_instant``), an id list (``id_in``), rows read back as model instances
(``columns_of``, ``fetch_instances``), and JIT turned off for a transaction (``jit_off``).

It is also where the apps' SQL asks which database it is on (``_postgresql``), so their
functions read as PostgreSQL's main path: an app's ``queries`` module holds PostgreSQL's
statements and ``queries_sqlite`` SQLite's versions under the same names (``statements``
picks one); a function whose SQLite version is other code names it with ``on_sqlite``, and
one with nothing to do there is ``postgresql_only``."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from types import ModuleType
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

ModelT = TypeVar("ModelT", bound=models.Model)
FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])
ProcedureT = TypeVar("ProcedureT", bound=Callable[..., None])

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


def _postgresql() -> bool:
    # seam: the one test of the backend behind these helpers (PostgreSQL, or else SQLite).
    return connection.vendor == "postgresql"


def queries_for_backend(postgresql: ModuleType, sqlite: ModuleType) -> ModuleType:
    """The statements module for the connection's backend: an app's ``queries``
    (PostgreSQL's) or its ``queries_sqlite`` (SQLite's versions, under the same names)."""
    return postgresql if _postgresql() else sqlite


def array(values: Iterable[Any]) -> Any:
    """A list as one parameter: an array on PostgreSQL (``= ANY(%(ids)s::bigint[])``), JSON
    text on SQLite, which has no arrays (``IN (SELECT value FROM json_each(%(ids)s))``)."""
    return list(values) if _postgresql() else json.dumps(list(values))


def json_instant(moment: datetime) -> str:
    """An instant inside a JSON parameter, in the form the backend compares with a stored
    one: ISO 8601 with its offset for PostgreSQL's timestamptz, the naive UTC text the ORM
    stores on SQLite."""
    return moment.isoformat() if _postgresql() else str(adapt(moment))


def on_sqlite(twin: FunctionT) -> Callable[[FunctionT], FunctionT]:
    """Decorate a function written for PostgreSQL: on SQLite ``twin``, its version there
    (the same signature, other code: SQLite has no arrays, no data-modifying CTE, no row
    locks), runs instead."""

    def decorate(function: FunctionT) -> FunctionT:
        @functools.wraps(function)
        def chosen(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if _postgresql() else twin(*args, **kwargs)

        return cast(FunctionT, chosen)

    return decorate


def postgresql_only(function: ProcedureT) -> ProcedureT:
    """Decorate a function written for PostgreSQL that SQLite needs nothing of (a lock its
    single writer already holds, a planner setting it does not have): there it does nothing."""

    @functools.wraps(function)
    def chosen(*args: Any, **kwargs: Any) -> None:
        if _postgresql():
            function(*args, **kwargs)

    return cast(ProcedureT, chosen)


def default_connection() -> BaseDatabaseWrapper:
    """Django's default connection itself, not the ``django.db.connection`` proxy, for a
    hot path that reads it many times: each attribute read through the proxy is a
    thread-local lookup, and placing an order read it sixteen times (BENCHMARKS.md,
    benchmark 3)."""
    return connections[DEFAULT_DB_ALIAS]


def fetch(sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
    """Run one statement on Django's connection (so in the caller's transaction), its
    parameters adapted; return its rows (none for a statement that returns none)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, _adapted(params))
        return list(cursor.fetchall()) if cursor.description is not None else []


def execute(sql: str, params: Params = ()) -> int:
    """Run one statement as ``fetch`` does; return how many rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, _adapted(params))
        return max(int(cursor.rowcount), 0)


@postgresql_only
def jit_off() -> None:
    """Turn PostgreSQL's JIT off for the rest of the caller's transaction (SET LOCAL; it
    must be in one). For statements the planner costs far past ``jit_above_cost`` though
    they stop after a batch or probe an index per row: JIT compiled them for longer than
    they ran, and for longer the more partitions they name (BENCHMARKS.md, benchmarks 1 and
    6). Nothing to do on SQLite."""
    execute("SET LOCAL jit = off")


def id_in(column: str, ids: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column`` is one of ``ids`` (ids or names): one array parameter on PostgreSQL, so a
    batch of thousands of ids is one parameter, not thousands of placeholders to parse and
    plan; a list on SQLite (it has no arrays)."""
    if _postgresql():
        return f"{column} = ANY(%s)", [list(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)


def columns_of(model: type[models.Model], *, without_pk: bool = False) -> str:
    """Every concrete column of ``model`` in field order, quoted: a ``RETURNING`` list that
    ``fetch_instances`` reads; ``without_pk``, all but the primary key's (an INSERT's
    column list, the id left to its default)."""
    fields = [field for field in model._meta.concrete_fields if not (without_pk and field.primary_key)]
    return ", ".join(connection.ops.quote_name(field.column) for field in fields)


def fetch_instances(model: type[ModelT], sql: str, params: Params = ()) -> list[ModelT]:
    """Run one statement as ``fetch`` does, returning every column of ``model``
    (``columns_of``); its rows as instances, read as a queryset reads them (``raw()``)."""
    return list(model._default_manager.raw(sql, _adapted(params)))


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


def _adapted(params: Params) -> Params:
    if _postgresql():
        return params  # psycopg adapts datetimes and dates itself, as the ORM's adapters do there
    if isinstance(params, Mapping):
        return {name: adapt(value) for name, value in params.items()}
    return [adapt(value) for value in params]
