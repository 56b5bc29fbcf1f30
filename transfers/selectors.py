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


def transfers_unsent_counts() -> dict[str, int]:
    """How many transfers are in each status but sent (0 included): the few rows not sent
    (index transfer_status), never a count of the sent history."""
    unsent = [status for status in TransferStatus if status != TransferStatus.SENT]
    rows = Transfer.objects.filter(status__in=unsent).order_by().values_list("status").annotate(n=Count("id"))
    counts = dict(rows.values_list("status", "n"))
    return {str(status): counts.get(status, 0) for status in unsent}


def reconciliation_latest() -> JobRun | None:
    """The newest successful reconciliation run: its result lists the mismatches it found."""
    runs = JobRun.objects.filter(job_name=RECONCILE_TRANSFERS_JOB, status=RunStatus.SUCCEEDED)
    return runs.order_by("-scheduled_for", "-id").first()


@dataclass(frozen=True)
class ReconciliationSummary:
    """The newest reconciliation, as /metrics and the transfers admin show it."""

    run_id: int
    checked_at: datetime
    counts: dict[str, int]  # "matched" and each mismatch kind


def reconciliation_summary() -> ReconciliationSummary | None:
    """The newest successful reconciliation's counts, or None before any that compared
    (a run with no provider configured compares nothing)."""
    latest = reconciliation_latest()
    if latest is None or not isinstance(latest.result, dict) or "counts" not in latest.result:
        return None
    counts = {str(kind): int(count) for kind, count in latest.result["counts"].items()}
    return ReconciliationSummary(latest.id, datetime.fromisoformat(latest.result["checked_at"]), counts)
