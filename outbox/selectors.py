"""Reads of an outbox table."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Model

from outbox.status import PENDING


def outbox_due(model: type[Model], *, now: datetime, limit: int) -> list[int]:
    """Ids of ``model``'s pending rows whose next attempt is due, oldest due first (each
    outbox's partial index on ``next_attempt_at`` where pending)."""
    rows = model._default_manager.filter(status=PENDING, next_attempt_at__lte=now)
    return list(rows.order_by("next_attempt_at", "id").values_list("id", flat=True)[:limit])
