"""The order's INSERT, written by hand so that it can share one statement with its
delayed cancellation (``scheduling.sql.claim_run_with_subject``).

Placing an order is the hottest write there is (benchmark 3 places a thousand a second),
and the ORM's ``Order.objects.create`` cannot be a CTE of another statement. The INSERT
here writes what ``create`` writes: every concrete column but the id, each value prepared
by its field as the ORM prepares it for a save (defaults included), and it returns every
column so the order comes back as the ORM would read it (``order_from_row``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from orders.models import ORDER_SUBJECT_PREFIX, Order
from scheduling.sql import SubjectInsert
from tiffin.db import columns_of, default_connection, instances_from_rows


def order_insert(*, restaurant_id: int, customer_ref: str, total: Decimal, placed_at: datetime) -> SubjectInsert:
    """The INSERT of a new placed order, for ``run_schedule_delayed_with_subject``: its
    cancellation's subject is ``order:<id>``."""
    given = {"restaurant_id": restaurant_id, "customer_ref": customer_ref, "total": total, "placed_at": placed_at}
    conn = default_connection()  # each field's preparation reads it
    values = tuple(
        field.get_db_prep_save(given.get(field.attname, field.get_default()), conn) for field in _written_fields()
    )
    return SubjectInsert(sql=_insert_statement(conn.vendor), params=values, subject_prefix=ORDER_SUBJECT_PREFIX)


def order_from_row(row: Sequence[Any]) -> Order:
    """The order as ``order_insert``'s statement returned it (every column, in field order)."""
    return instances_from_rows(Order, [row])[0]


@functools.cache
def _written_fields() -> tuple[Any, ...]:
    return tuple(field for field in Order._meta.concrete_fields if not field.primary_key)


@functools.cache
def _insert_statement(vendor: str) -> str:
    # The vendor is part of the key only because quoting is the backend's. The columns are
    # _written_fields' in the same order, which the values of order_insert follow.
    placeholders = ", ".join(["%s"] * len(_written_fields()))
    return (
        f"INSERT INTO orders_order ({columns_of(Order, without_pk=True)}) VALUES ({placeholders}) "
        f"RETURNING {columns_of(Order)}"
    )
