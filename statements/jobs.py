"""The job that mails the statement outbox.

Every minute. A tick that finds the previous run still mailing is skipped (the running one
takes every due statement); missed ticks collapse into one. Each statement carries its own
retry schedule (``next_attempt_at``), so the job itself is not retried: the next minute's
run is.
"""

from __future__ import annotations

import logging

from django.conf import settings

from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.registry import job
from statements.models import SEND_STATEMENTS_JOB
from statements.services import SendProgress, statements_send_due
from tiffin import clock

logger = logging.getLogger(__name__)


@job(
    SEND_STATEMENTS_JOB,
    cron="* * * * *",
    timezone="UTC",
    misfire=Misfire.COALESCE,
    overlap=Overlap.FORBID,
    heartbeat=True,
    max_attempts=1,
    # Heartbeats come after each pass of STATEMENTS_BATCH_SIZE statements; a pass whose
    # sends all time out lasts about batch x EMAIL_TIMEOUT x the SMTP steps.
    timeout_seconds=600,
)
def send_statements(ctx: RunContext) -> dict[str, int]:
    """Mail every due pending statement under this run's fence."""

    def on_batch(progress: SendProgress) -> None:
        ctx.batch_done(progress)  # heartbeats; raises RunLostError if the run is no longer ours
        logger.info("statements pass %s: %s sent, %s retrying", progress.batches_done, progress.sent, progress.retrying)

    return statements_send_due(
        fence=ctx.fence,
        job_run_id=ctx.run_id,
        read_clock=clock.now,
        batch_size=settings.STATEMENTS_BATCH_SIZE,
        on_batch=on_batch,
    )
