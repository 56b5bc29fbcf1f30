"""The schedule both outboxes' sender jobs run on."""

from __future__ import annotations

from collections.abc import Callable

from scheduling.models import Misfire, Overlap
from scheduling.registry import Handler, job

# The longest a sender's run may go without a heartbeat (one batch's sends).
SENDER_TIMEOUT_SECONDS = 600


def outbox_sender_job(name: str) -> Callable[[Handler], Handler]:
    """Declare ``name``, the job that sends an outbox's due rows: every minute, so a row
    written by a payout run leaves at the next tick. A tick that finds the previous run
    still sending is skipped (the running one takes every due row); missed ticks collapse
    into one. Each row carries its own retry schedule (``next_attempt_at``), so the job
    itself is not retried: the next minute's run is. It heartbeats after each batch, and
    a batch may take up to ``SENDER_TIMEOUT_SECONDS`` before the run counts as lost (each
    app says why its batches fit)."""
    return job(
        name,
        cron="* * * * *",
        timezone="UTC",
        misfire=Misfire.COALESCE,
        overlap=Overlap.FORBID,
        heartbeat=True,
        max_attempts=1,
        timeout_seconds=SENDER_TIMEOUT_SECONDS,
    )
