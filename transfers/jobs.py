"""The job that sends the transfer outbox to the payment provider.

Every minute, and right after each payout run (``transfers_send_soon``). A tick that
finds the previous run still sending is skipped (the running one takes every due
transfer); missed ticks collapse into one. Each transfer carries its own retry schedule
(``next_attempt_at``), so the job itself is not retried: the next minute's run is.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.monitoring import CheckWindow, Problem, invariant
from scheduling.registry import job
from tiffin import clock
from transfers.models import SEND_TRANSFERS_JOB
from transfers.selectors import transfers_stopped
from transfers.services import SendProgress, transfer_problem, transfers_send_due

logger = logging.getLogger(__name__)


@job(
    SEND_TRANSFERS_JOB,
    cron="* * * * *",
    timezone="UTC",
    misfire=Misfire.COALESCE,
    overlap=Overlap.FORBID,
    heartbeat=True,
    max_attempts=1,
    # Heartbeats come after each pass of TRANSFERS_BATCH_SIZE transfers; a pass whose
    # requests all time out lasts about (batch / concurrency) x the provider timeout.
    timeout_seconds=600,
)
def send_transfers(ctx: RunContext) -> dict[str, Any]:
    """Send every due pending transfer under this run's fence."""

    def on_batch(progress: SendProgress) -> None:
        ctx.batch_done(progress)  # heartbeats; raises RunLostError if the run is no longer ours
        logger.info(
            "transfers pass %s: %s sent, %s retrying, %s stopped",
            progress.batches_done,
            progress.sent,
            progress.retrying,
            progress.stopped,
        )

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
def stopped_transfers(window: CheckWindow) -> list[Problem]:
    """Every stopped transfer is a problem until a person retries it (the alert went out
    when it stopped; the check keeps it open and resolves it once it is no longer stopped)."""
    return [transfer_problem(transfer=transfer, detail=transfer.last_error) for transfer in transfers_stopped()]
