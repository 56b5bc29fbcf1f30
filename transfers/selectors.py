"""Reads of the transfer outbox."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, QuerySet

from scheduling.models import JobRun, RunStatus
from transfers.models import RECONCILE_TRANSFERS_JOB, Transfer, TransferStatus


def transfers_unsent(*, written_before: datetime) -> QuerySet[Transfer]:
    """Transfers pending or waiting for an account, written before ``written_before``
    (index transfer_status: the few rows not sent)."""
    waiting = [TransferStatus.PENDING, TransferStatus.WAITING_ACCOUNT]
    return Transfer.objects.filter(status__in=waiting, created_at__lt=written_before).order_by("id")


def transfers_stopped() -> QuerySet[Transfer]:
    """The transfers a person must look at, stopped or held (index transfer_status)."""
    return Transfer.objects.filter(status__in=[TransferStatus.STOPPED, TransferStatus.HELD]).order_by("id")


@dataclass(frozen=True)
class StatusCounts:
    waiting_account: int
    pending: int
    sent: int
    stopped: int
    held: int


def transfer_status_counts() -> StatusCounts:
    counts = dict(Transfer.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    return StatusCounts(
        waiting_account=counts.get(TransferStatus.WAITING_ACCOUNT, 0),
        pending=counts.get(TransferStatus.PENDING, 0),
        sent=counts.get(TransferStatus.SENT, 0),
        stopped=counts.get(TransferStatus.STOPPED, 0),
        held=counts.get(TransferStatus.HELD, 0),
    )


def reconciliation_latest() -> JobRun | None:
    """The newest successful reconciliation run: its result lists the mismatches it found."""
    runs = JobRun.objects.filter(job_name=RECONCILE_TRANSFERS_JOB, status=RunStatus.SUCCEEDED)
    return runs.order_by("-scheduled_for", "-id").first()
