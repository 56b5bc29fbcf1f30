"""The SQL of the statement outbox that the ORM would write row by row (PostgreSQL only).

The payout pass writes a batch's payouts in one statement (payouts/queries.py); their
statements, rendered in Python (the body is a template), are written in one statement
too, each column passed as one array, in the batch's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from outbox.sql import initial_state_columns
from tiffin.db import execute

# One statement per row of the arrays: the frozen email of one payout, pending if it has a
# recipient (due at once), else waiting for one. The unique (restaurant, period start) and
# message_id keys refuse a second statement for a payout.
_INSERT = f"""
INSERT INTO statements_statement (
    payout_id, restaurant_id, period_start, recipient, subject, body, message_id,
    status, attempts, next_attempt_at, last_error, created_at
)
SELECT s.payout_id, s.restaurant_id, s.period_start, s.recipient, s.subject, s.body, s.message_id,
       {initial_state_columns("s.recipient")}
FROM unnest(%(payout_ids)s::bigint[], %(restaurant_ids)s::bigint[], %(period_starts)s::timestamptz[],
            %(recipients)s::text[], %(subjects)s::text[], %(bodies)s::text[], %(message_ids)s::text[])
     AS s (payout_id, restaurant_id, period_start, recipient, subject, body, message_id)
"""


@dataclass(frozen=True)
class NewStatement:
    """The frozen columns of one payout's statement, as rendered."""

    payout_id: int
    restaurant_id: int
    period_start: datetime
    recipient: str
    subject: str
    body: str
    message_id: str


def statements_insert(*, rows: Sequence[NewStatement], written_at: datetime, pending: str, waiting: str) -> int:
    """Write ``rows`` (``_INSERT``), created at ``written_at``; return how many."""
    if not rows:
        return 0
    params = {
        "payout_ids": [row.payout_id for row in rows],
        "restaurant_ids": [row.restaurant_id for row in rows],
        "period_starts": [row.period_start for row in rows],
        "recipients": [row.recipient for row in rows],
        "subjects": [row.subject for row in rows],
        "bodies": [row.body for row in rows],
        "message_ids": [row.message_id for row in rows],
        "written_at": written_at,
        "pending": pending,
        "waiting": waiting,
    }
    return execute(_INSERT, params)
