"""Reads of the transfer outbox."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, QuerySet

from transfers.models import Transfer, TransferStatus


def transfers_due(*, now: datetime, limit: int) -> list[int]:
    """Ids of the pending transfers whose next attempt is due, oldest due first
    (the partial index transfer_pending_due)."""
    return list(
        Transfer.objects.filter(status=TransferStatus.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )


def transfers_stopped() -> QuerySet[Transfer]:
    """The transfers a person must look at (index transfer_status)."""
    return Transfer.objects.filter(status=TransferStatus.STOPPED).order_by("id")


@dataclass(frozen=True)
class StatusCounts:
    waiting_account: int
    pending: int
    sent: int
    stopped: int


def transfer_status_counts() -> StatusCounts:
    counts = dict(Transfer.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    return StatusCounts(
        waiting_account=counts.get(TransferStatus.WAITING_ACCOUNT, 0),
        pending=counts.get(TransferStatus.PENDING, 0),
        sent=counts.get(TransferStatus.SENT, 0),
        stopped=counts.get(TransferStatus.STOPPED, 0),
    )
