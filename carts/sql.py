"""The clean-up's deletes, in one place.

Both statements re-check ``updated_at < cutoff`` at delete time, so a cart touched after
it was picked is kept (on PostgreSQL the picked rows are also locked, so nothing can touch
them in between; on SQLite the single writer gives the same guarantee). The items go
first and only for carts that pass the re-check, in the caller's transaction.

Indexes: ``carts_cartitem_cart_id`` (the foreign key's) for the items, the primary key of
``carts_cart`` for the carts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection


def cart_items_delete(*, cart_ids: Sequence[int], cutoff: datetime) -> int:
    """Delete the items of those of ``cart_ids`` still untouched since before ``cutoff``."""
    marks = ", ".join(["%s"] * len(cart_ids))
    sql = (
        "DELETE FROM carts_cartitem WHERE cart_id IN "
        f"(SELECT id FROM carts_cart WHERE id IN ({marks}) AND updated_at < %s)"
    )
    return _execute(sql, [*cart_ids, connection.ops.adapt_datetimefield_value(cutoff)])


def carts_delete(*, cart_ids: Sequence[int], cutoff: datetime) -> int:
    """Delete those of ``cart_ids`` still untouched since before ``cutoff``."""
    marks = ", ".join(["%s"] * len(cart_ids))
    sql = f"DELETE FROM carts_cart WHERE id IN ({marks}) AND updated_at < %s"
    return _execute(sql, [*cart_ids, connection.ops.adapt_datetimefield_value(cutoff)])


def _execute(sql: str, params: list[Any]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return max(int(cursor.rowcount), 0)
