"""The clean-up's batch, in one place.

A batch picks the next stale carts in id order after the previous batch's last, deletes
those still untouched (``updated_at < cutoff`` re-checked) and then the items of exactly
the carts deleted, in the caller's transaction (the items' foreign key is deferred, so it
is checked at commit, when they are gone).

On PostgreSQL that is one statement (``STALE_BATCH_DELETE``): the pick locks its carts
``FOR UPDATE SKIP LOCKED`` (a cart being changed is skipped; a change after the pick waits
for the commit, then finds the cart gone), and nothing travels but four counts. On SQLite,
which has no data-modifying ``WITH``, the same three steps are three statements; its
single writer keeps every picked cart unchanged until the commit.

Indexes: the primary key of ``carts_cart`` for the carts, ``carts_cartitem_cart_id`` (the
foreign key's) for the items. Both deletes also name the batch's id range (``BETWEEN``),
which adds nothing to what they delete but gives the planner the range: without it
PostgreSQL estimated a batch at a few percent of its table and hashed all of it, once per
batch (docs/benchmark-history.md); with it, a range scan of the index over the batch's
carts, which sit together because batches go in id order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from tiffin.db import execute, fetch, id_in


@dataclass(frozen=True)
class StaleBatch:
    last_id: int | None  # the last cart picked (the next batch starts after it); None: none was
    picked: int
    carts: int
    items: int


STALE_BATCH_DELETE = """
WITH picked AS (
    SELECT id FROM carts_cart
    WHERE updated_at < %(cutoff)s AND id > %(after_id)s
    ORDER BY id LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), span AS (
    SELECT min(id) AS low, max(id) AS high, count(*) AS picked FROM picked
), deleted AS (
    DELETE FROM carts_cart c USING picked p
    WHERE c.id = p.id AND c.updated_at < %(cutoff)s
      AND c.id BETWEEN (SELECT low FROM span) AND (SELECT high FROM span)
    RETURNING c.id
), items AS (
    DELETE FROM carts_cartitem i USING deleted d
    WHERE i.cart_id = d.id
      AND i.cart_id BETWEEN (SELECT low FROM span) AND (SELECT high FROM span)
    RETURNING 1
)
SELECT high, picked, (SELECT count(*) FROM deleted), (SELECT count(*) FROM items) FROM span
"""


def stale_batch_delete(*, cutoff: datetime, after_id: int, batch_size: int) -> StaleBatch:
    """Pick up to ``batch_size`` carts untouched since before ``cutoff`` with ids above
    ``after_id``, delete those still untouched and their items; say what was done.

    One statement, so the batch's ids never travel to the client and back
    (docs/benchmark-history.md)."""
    params = {"cutoff": cutoff, "after_id": after_id, "batch_size": batch_size}
    if connection.vendor == "postgresql":  # seam: SQLite has no data-modifying WITH (see above)
        last_id, picked, carts, items = fetch(STALE_BATCH_DELETE, params)[0]
        return StaleBatch(last_id=last_id, picked=picked, carts=carts, items=items)
    rows = fetch(
        "SELECT id FROM carts_cart WHERE updated_at < %(cutoff)s AND id > %(after_id)s "
        "ORDER BY id LIMIT %(batch_size)s",
        params,
    )
    picked = [row[0] for row in rows]
    deleted = carts_delete(cart_ids=picked, cutoff=cutoff)
    return StaleBatch(
        last_id=picked[-1] if picked else None,
        picked=len(picked),
        carts=len(deleted),
        items=cart_items_delete(cart_ids=deleted),
    )


def carts_delete(*, cart_ids: Sequence[int], cutoff: datetime) -> list[int]:
    """Delete those of ``cart_ids`` still untouched since before ``cutoff``; return the
    ids deleted (SQLite's second step). Carts first, then their items: each cart's row is
    probed once, not once in an items' re-check and again here."""
    if not cart_ids:
        return []
    ids, params = id_in("id", cart_ids)
    return [
        row[0]
        for row in fetch(f"DELETE FROM carts_cart WHERE {ids} AND updated_at < %s RETURNING id", [*params, cutoff])
    ]


def cart_items_delete(*, cart_ids: Sequence[int]) -> int:
    """Delete the items of ``cart_ids`` (carts just deleted; SQLite's third step)."""
    if not cart_ids:
        return 0
    ids, params = id_in("cart_id", cart_ids)
    sql = f"DELETE FROM carts_cartitem WHERE cart_id BETWEEN %s AND %s AND {ids}"
    return execute(sql, [min(cart_ids), max(cart_ids), *params])
