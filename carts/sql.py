"""The clean-up's deletes, in one place.

Both statements re-check ``updated_at < cutoff`` at delete time, so a cart touched after
it was picked is kept (on PostgreSQL the picked rows are also locked, so nothing can touch
them in between; on SQLite the single writer gives the same guarantee). The items go
first and only for carts that pass the re-check, in the caller's transaction.

Indexes: ``carts_cartitem_cart_id`` (the foreign key's) for the items, the primary key of
``carts_cart`` for the carts. The ids are one array parameter on PostgreSQL
(``tiffin.db.id_in``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tiffin.db import execute, id_in


def cart_items_delete(*, cart_ids: Sequence[int], cutoff: datetime) -> int:
    """Delete the items of those of ``cart_ids`` still untouched since before ``cutoff``.

    ``cart_id BETWEEN`` the smallest and largest of the ids adds nothing to what is
    deleted, but gives the planner the range: without it, PostgreSQL estimated a batch's
    items at a few percent of the table and read all of it, once per batch (a sequential
    scan of every item, half the clean-up's time at 100,000 carts; BENCHMARKS.md,
    benchmark 2); with it, one range scan of the foreign key's index over the batch's
    carts, which sit together because batches go in id order.
    """
    ids, params = id_in("id", cart_ids)
    sql = (
        "DELETE FROM carts_cartitem WHERE cart_id BETWEEN %s AND %s"
        f" AND cart_id IN (SELECT id FROM carts_cart WHERE {ids} AND updated_at < %s)"
    )
    return execute(sql, [min(cart_ids), max(cart_ids), *params, cutoff])


def carts_delete(*, cart_ids: Sequence[int], cutoff: datetime) -> int:
    """Delete those of ``cart_ids`` still untouched since before ``cutoff``."""
    ids, params = id_in("id", cart_ids)
    sql = f"DELETE FROM carts_cart WHERE {ids} AND updated_at < %s"
    return execute(sql, [*params, cutoff])
