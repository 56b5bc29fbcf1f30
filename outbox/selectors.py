"""Reads of an outbox table."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Model

from outbox.status import PENDING
from tiffin.db import fetch


def outbox_due(model: type[Model], *, now: datetime, limit: int) -> list[int]:
    """Ids of ``model``'s pending rows whose next attempt is due, oldest due first (each
    outbox's partial index on ``next_attempt_at`` where pending).

    Written as SQL, the queryset ``filter(status=PENDING, next_attempt_at__lte=now)
    .order_by("next_attempt_at", "id")`` would cost more to compile than to run (0.34 ms
    against 0.08 ms a call, asked once per ~4 transfers by the sender; benchmark 8's CPU
    per 1,000 transfers: 2.45 s -> 2.31 s)."""
    table = connection.ops.quote_name(model._meta.db_table)
    statement = (
        f"SELECT id FROM {table} WHERE status = '{PENDING}' AND next_attempt_at <= %s "
        "ORDER BY next_attempt_at, id LIMIT %s"
    )
    return [row[0] for row in fetch(statement, [now, limit])]
