"""The SQL of the transfer outbox that the ORM would write row by row (PostgreSQL only).

The payout pass writes thousands of payouts in one statement (payouts/queries.py); their
transfers are written the same way, one statement for the batch, in the batch's
transaction. "The payouts just written" are those of the batch's restaurants created at
the pass's instant (``payout_created_at`` or ``payout_one_per_restaurant_week`` finds
them) with no transfer yet (the unique index on ``transfers_transfer.payout_id``).

The identity (idempotency key and transfer group) is ``transfers.models.transfer_identity``
written in SQL: ``payout-{restaurant_id}-{period_start in UTC, %Y%m%dT%H%M%SZ}``. Parameters
are named: ``restaurant_ids`` (a list), ``written_at``, ``scale`` (10 to
the currency's minor-unit exponent), ``currency``, ``pending``, ``waiting``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from outbox.sql import initial_state_columns
from tiffin.db import execute, fetch

# The first payout just written with a positive net that is not a whole number of the
# currency's minor units: the pass refuses it rather than round it (transfers/services.py).
_INEXACT = """
SELECT p.restaurant_id, p.period_start, p.net
FROM payouts_payout p
WHERE p.restaurant_id = ANY(%(restaurant_ids)s::bigint[]) AND p.created_at = %(written_at)s AND p.net > 0
  AND p.net * %(scale)s <> TRUNC(p.net * %(scale)s)
ORDER BY p.restaurant_id, p.period_start
LIMIT 1
"""

# One transfer per payout just written with a positive net and no transfer yet: the frozen
# request (amount in minor units, exact once _INEXACT found nothing; the restaurant's
# account, or waiting for one), keyed by the payout's business identity.
_INSERT = f"""
INSERT INTO transfers_transfer (
    payout_id, restaurant_id, period_start, amount_minor, currency, destination, idempotency_key,
    transfer_group, provider_id, status, attempts, next_attempt_at, last_error, created_at
)
SELECT p.id, p.restaurant_id, p.period_start, (p.net * %(scale)s)::bigint, %(currency)s, r.provider_account,
       k.identity, k.identity,
       '', {initial_state_columns("r.provider_account")}
FROM payouts_payout p
JOIN orders_restaurant r ON r.id = p.restaurant_id
CROSS JOIN LATERAL (
    SELECT 'payout-' || p.restaurant_id || '-'
           || to_char(p.period_start AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS"Z"') AS identity
) k
WHERE p.restaurant_id = ANY(%(restaurant_ids)s::bigint[]) AND p.created_at = %(written_at)s AND p.net > 0
  AND NOT EXISTS (SELECT 1 FROM transfers_transfer t WHERE t.payout_id = p.id)
ORDER BY p.restaurant_id, p.period_start
"""


def transfers_inexact_first(
    *, restaurant_ids: list[int], written_at: datetime, scale: int
) -> tuple[int, datetime, Decimal] | None:
    """(restaurant id, period start, net) of the first payout written at ``written_at``
    whose net times ``scale`` is not whole, or None."""
    rows = fetch(_INEXACT, {"restaurant_ids": restaurant_ids, "written_at": written_at, "scale": scale})
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


def transfers_insert_for_payouts(
    *, restaurant_ids: list[int], written_at: datetime, scale: int, currency: str, pending: str, waiting: str
) -> int:
    """Write the transfers of the payouts written at ``written_at`` (``_INSERT``); return
    how many."""
    params: dict[str, Any] = {
        "restaurant_ids": restaurant_ids,
        "written_at": written_at,
        "scale": scale,
        "currency": currency,
        "pending": pending,
        "waiting": waiting,
    }
    return execute(_INSERT, params)
