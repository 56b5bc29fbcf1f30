"""The job that mails the statement outbox.

Every minute. A tick that finds the previous run still mailing is skipped (the running one
takes every due statement); missed ticks collapse into one. Each statement carries its own
retry schedule (``next_attempt_at``), so the job itself is not retried: the next minute's
run is.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings

from operations.monitoring import CheckWindow, Problem, invariant
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap, ProblemKind
from scheduling.registry import job
from statements.models import SEND_STATEMENTS_JOB, StatementStatus
from statements.selectors import statements_unsent_since
from statements.services import SendProgress, statements_send_due
from tiffin import clock

logger = logging.getLogger(__name__)

# Unsent statements reported per check (all of them stay counted in the statement admin).
UNSENT_PROBLEMS_KEPT = 1000


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


@invariant
def statements_sent(window: CheckWindow) -> list[Problem]:
    """Every statement is sent at least once: one still unsent STATEMENTS_UNSENT_GRACE_SECONDS
    after it was written is a problem (a mail server down for that long, a restaurant with
    no address), keyed by its Message-ID, so it is alerted once and resolved when it goes."""
    grace = timedelta(seconds=settings.STATEMENTS_UNSENT_GRACE_SECONDS)
    unsent = statements_unsent_since(written_before=window.now - grace)[:UNSENT_PROBLEMS_KEPT]
    return [
        Problem(
            ProblemKind.INVARIANT,
            SEND_STATEMENTS_JOB,
            statement.period_start,
            f"statement:{statement.message_id}",
            None,
            "statement not sent: "
            + (
                "the restaurant has no statement_email"
                if statement.status == StatementStatus.WAITING_RECIPIENT
                else f"{statement.attempts} attempts, last: {statement.last_error or 'none yet'}"
            ),
        )
        for statement in unsent
    ]
