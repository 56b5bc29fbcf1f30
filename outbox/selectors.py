"""Reads of an outbox table."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Model, QuerySet

from outbox.status import PENDING


def outbox_due(model: type[Model], *, now: datetime, limit: int) -> list[int]:
    """Ids of ``model``'s pending rows whose next attempt is due, oldest due first (each
    outbox's partial index on ``next_attempt_at`` where pending)."""
    return list(_due(model, now=now).order_by("next_attempt_at", "id").values_list("id", flat=True)[:limit])


def outbox_due_count(model: type[Model], *, now: datetime) -> int:
    """How many of ``model``'s rows ``outbox_due`` would hand a sender now."""
    return _due(model, now=now).count()


def _due(model: type[Model], *, now: datetime) -> QuerySet[Model]:
    return model._default_manager.filter(status=PENDING, next_attempt_at__lte=now)
