"""The order's INSERT, written by hand so that it can share one statement with its
delayed cancellation (``scheduling.sql.claim_run_with_subject``).

Placing an order is the hottest write there is (benchmark 3 places a thousand a second),
and the ORM's ``Order.objects.create`` cannot be a CTE of another statement. The INSERT
here writes what ``create`` writes: every concrete column but the id, each value prepared
by its field as the ORM prepares it for a save (defaults included). It returns only the
new id, and ``order_created`` builds the order from the values given, as ``create``
returns it, rather than reading every column back.
"""

from __future__ import annotations

import functools
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import NOT_PROVIDED

from orders.models import ORDER_SUBJECT_PREFIX, Order
from scheduling.sql import SubjectInsert
from tiffin.db import default_connection, instance_created


def order_insert(*, restaurant_id: int, customer_ref: str, total: Decimal, placed_at: datetime) -> SubjectInsert:
    """The INSERT of a new placed order, for ``run_schedule_delayed_with_subject``: its
    cancellation's subject is ``order:<id>``."""
    conn = default_connection()  # each field's preparation reads it
    given = (restaurant_id, customer_ref, total, placed_at)
    values = [field.get_db_prep_save(value, conn) for field, value in zip(_given_fields(), given, strict=True)]
    statement, defaults = _prepared(conn.vendor)  # seam: a cache key, not a branch
    return SubjectInsert(sql=statement, params=(*values, *defaults), subject_prefix=ORDER_SUBJECT_PREFIX)


def order_created(
    *, order_id: int, restaurant_id: int, customer_ref: str, total: Decimal, placed_at: datetime
) -> Order:
    """The order ``order_insert``'s statement wrote as ``id``, as ``Order.objects.create``
    would return it (``tiffin.db.instance_created``)."""
    return instance_created(
        Order, order_id, dict(zip(_GIVEN, (restaurant_id, customer_ref, total, placed_at), strict=True))
    )


# The columns order_insert is given; every other column but the id takes its default.
_GIVEN = ("restaurant_id", "customer_ref", "total", "placed_at")


@functools.cache
def _given_fields() -> tuple[Any, ...]:
    return tuple(Order._meta.get_field(name) for name in _GIVEN)


@functools.cache
def _defaulted_fields() -> tuple[Any, ...]:
    """The other columns but the id, each with a default that is a constant: one that is
    computed (a callable, such as ``timezone.now``) would have to be computed per order."""
    found = tuple(f for f in Order._meta.concrete_fields if not f.primary_key and f.attname not in _GIVEN)
    computed = [f.name for f in found if (f.has_default() and callable(f.default)) or f.db_default is not NOT_PROVIDED]
    if computed:
        raise TypeError(f"orders.sql writes constant defaults only; Order.{computed[0]} has a computed default")
    return found


@functools.cache
def _prepared(vendor: str) -> tuple[str, tuple[Any, ...]]:
    """The INSERT, its columns the given ones then the defaulted ones (in the order of
    order_insert's values), and the defaults as each field prepares them for a save. Per
    backend (``vendor`` is only the cache's key): the quoting and the preparation are its."""
    conn = default_connection()
    columns = ", ".join(conn.ops.quote_name(f.column) for f in _given_fields() + _defaulted_fields())
    placeholders = ", ".join(["%s"] * (len(_given_fields()) + len(_defaulted_fields())))
    defaults = tuple(field.get_db_prep_save(field.get_default(), conn) for field in _defaulted_fields())
    return f"INSERT INTO orders_order ({columns}) VALUES ({placeholders}) RETURNING id", defaults
