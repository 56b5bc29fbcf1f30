"""The job that sends the transfer outbox to the payment provider.

Every minute: the transfers a payout run writes leave at the next tick. A tick that
finds the previous run still sending is skipped (the running one takes every due
transfer); missed ticks collapse into one. Each transfer carries its own retry schedule
(``next_attempt_at``), so the job itself is not retried: the next minute's run is.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from operations.monitoring import CheckWindow, Problem, invariant
from outbox.jobs import outbox_sender_job
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap, ProblemKind
from scheduling.registry import job
from tiffin import clock
from transfers.models import RECONCILE_TRANSFERS_JOB, SEND_TRANSFERS_JOB, Transfer
from transfers.provider import provider_client, provider_configured
from transfers.reconciliation import transfers_reconcile
from transfers.selectors import reconciliation_latest, transfers_stopped, transfers_unsent
from transfers.services import SendProgress, transfer_problem, transfers_send_due

logger = logging.getLogger(__name__)

# Mismatches kept in a reconciliation run's result (all are counted).
RECONCILE_PROBLEMS_KEPT = 1000


# Heartbeats come after every TRANSFERS_BATCH_SIZE answers recorded; if every request
# times out, that is about (batch / concurrency) x the provider timeout apart, which the
# sender's timeout (outbox.jobs.SENDER_TIMEOUT_SECONDS) must exceed.
@outbox_sender_job(SEND_TRANSFERS_JOB)
def send_transfers(ctx: RunContext) -> dict[str, Any]:
    """Send every due pending transfer under this run's fence."""
    if not provider_configured():
        logger.warning("PAYMENT_PROVIDER_URL is not set: no transfer is sent")
        return {"skipped": "PAYMENT_PROVIDER_URL is not set"}

    def on_batch(progress: SendProgress) -> None:
        ctx.batch_done(progress)  # heartbeats; raises RunLostError if the run is no longer ours
        logger.info("transfers %s", progress)

    result = transfers_send_due(
        fence=ctx.fence,
        job_run_id=ctx.run_id,
        read_clock=clock.now,
        concurrency=settings.TRANSFERS_CONCURRENCY,
        batch_size=settings.TRANSFERS_BATCH_SIZE,
        on_batch=on_batch,
    )
    return {"attached": result.attached, **result.counts}


@invariant
def transfers_not_sent(window: CheckWindow) -> list[Problem]:
    """Every stopped or held transfer, and every one still unsent after
    TRANSFERS_RECONCILE_GRACE_SECONDS while a provider is configured (a provider down, a
    restaurant not connected), is a problem until it is sent: a paid week without its transfer. A stopped
    or held one was alerted when it stopped; the same key here does not alert it again."""
    grace = timedelta(seconds=settings.TRANSFERS_RECONCILE_GRACE_SECONDS)
    # With no provider configured (a laptop, the demo) nothing could have been sent: the
    # transfers wait, and `check --deploy` warns a server of it (tiffin.W002).
    late = transfers_unsent(written_before=window.now - grace) if provider_configured() else []
    return [
        *(transfer_problem(transfer=t, detail=t.last_error, state=t.status) for t in transfers_stopped()),
        *(transfer_problem(transfer=t, detail=_unsent(t), state="unsent") for t in late),
    ]


def _unsent(transfer: Transfer) -> str:
    return f"not sent since {transfer.created_at:%Y-%m-%d %H:%M} UTC ({transfer.get_status_display()}): " + (
        transfer.last_error or "no attempt answered yet"
    )


@job(
    RECONCILE_TRANSFERS_JOB,
    cron="0 4 * * *",
    timezone="UTC",
    misfire=Misfire.COALESCE,
    overlap=Overlap.FORBID,
    max_attempts=3,
    backoff_seconds=300,
)
def reconcile_transfers(ctx: RunContext) -> dict[str, Any]:
    """Compare the provider's transfers with the ledger (``transfers.reconciliation``);
    the result holds how many matched and the mismatches of each kind (which /metrics and
    the transfers admin show) and the mismatches themselves (which the
    ``transfers_reconciled`` invariant reports)."""
    if not provider_configured():
        logger.warning("PAYMENT_PROVIDER_URL is not set: nothing to reconcile with")
        return {"skipped": "PAYMENT_PROVIDER_URL is not set"}
    now = clock.now()
    window = settings.TRANSFERS_RECONCILE_WINDOW_DAYS
    found = transfers_reconcile(
        client=provider_client(),
        now=now,
        created_since=now - timedelta(days=window) if window else None,
        grace=timedelta(seconds=settings.TRANSFERS_RECONCILE_GRACE_SECONDS),
    )
    return {
        "checked_at": now.isoformat(),
        "counts": found.counts(),
        "mismatches": len(found.mismatches),
        "problems": [mismatch.as_dict() for mismatch in found.mismatches[:RECONCILE_PROBLEMS_KEPT]],
    }


@invariant
def transfers_reconciled(window: CheckWindow) -> list[Problem]:
    """The mismatches of the newest reconciliation, one problem per transfer group and kind,
    dated by the payout's period start, so the same mismatch found again the next day is
    the same problem (alerted once) and one no longer found is resolved."""
    latest = reconciliation_latest()
    if latest is None or not isinstance(latest.result, dict):
        return []
    return [
        Problem(
            ProblemKind.INVARIANT,
            RECONCILE_TRANSFERS_JOB,
            _period_of(item["transfer_group"], fallback=latest.scheduled_for),
            f"transfer:{item['transfer_group']}:{item['kind']}",
            latest.id,
            f"reconciliation: {item['detail']}",
        )
        for item in latest.result.get("problems", [])
    ]


def _period_of(group: str, *, fallback: datetime) -> datetime:
    """The period start a group ``payout-{restaurant}-{YYYYmmddTHHMMSSZ}`` names (a group
    the ledger never wrote may not name one: then ``fallback``)."""
    try:
        return datetime.strptime(group.rsplit("-", 1)[-1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return fallback
