"""The clean-up's deletes, in one place.

The carts go first: their delete re-checks ``updated_at < cutoff`` and returns the ids it
deleted, and only those carts' items follow, in the caller's transaction (the items'
foreign key is deferred, so it is checked at commit, when they are gone). On PostgreSQL
the picked carts are also locked, so nothing can touch them between the pick and the
delete; on SQLite the single writer gives the same guarantee.

Indexes: the primary key of ``carts_cart`` for the carts, ``carts_cartitem_cart_id`` (the
foreign key's) for the items. The ids are one array parameter on PostgreSQL
(``tiffin.db.id_in``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tiffin.db import execute, fetch, id_in


def carts_delete(*, cart_ids: Sequence[int], cutoff: datetime) -> list[int]:
    """Delete those of ``cart_ids`` still untouched since before ``cutoff``; return the
    ids deleted. (Items first, each batch probed every cart's row twice, once in the
    items' re-check and once here: the carts first, it is once; BENCHMARKS.md,
    benchmark 2.)"""
    ids, params = id_in("id", cart_ids)
    return [
        row[0]
        for row in fetch(f"DELETE FROM carts_cart WHERE {ids} AND updated_at < %s RETURNING id", [*params, cutoff])
    ]


def cart_items_delete(*, cart_ids: Sequence[int]) -> int:
    """Delete the items of ``cart_ids`` (carts just deleted).

    ``cart_id BETWEEN`` the smallest and largest of the ids adds nothing to what is
    deleted, but gives the planner the range: without it, PostgreSQL estimated a batch's
    items at a few percent of the table and read all of it, once per batch (a sequential
    scan of every item, half the clean-up's time at 100,000 carts; BENCHMARKS.md,
    benchmark 2); with it, one range scan of the foreign key's index over the batch's
    carts, which sit together because batches go in id order.
    """
    if not cart_ids:
        return 0
    ids, params = id_in("cart_id", cart_ids)
    sql = f"DELETE FROM carts_cartitem WHERE cart_id BETWEEN %s AND %s AND {ids}"
    return execute(sql, [min(cart_ids), max(cart_ids), *params])
