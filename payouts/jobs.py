"""The weekly payout job.

``30 20 * * 0`` in UTC is 02:00 on Monday in India. Missed ticks are caught up one by
one (each pays what was finished as of its own tick, so a late run pays exactly what the
on-time run would have), and a tick that comes while a run is still going waits for it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from payouts.models import PAYOUT_JOB
from payouts.selectors import ledger_problems, payout_paid_as_of, payout_totals, payouts_of_run
from payouts.services import BatchProgress, payout_subject_parse, payouts_pay_due
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap, ProblemKind
from scheduling.monitoring import CheckWindow, Problem, invariant
from scheduling.registry import job
from tiffin import clock
from transfers.services import transfers_send_soon

logger = logging.getLogger(__name__)


@job(
    PAYOUT_JOB,
    cron="30 20 * * 0",
    timezone="UTC",
    misfire=Misfire.CATCH_UP,
    overlap=Overlap.QUEUE,
    heartbeat=True,
    max_attempts=5,
    backoff_seconds=60,
    # Every run is kept: a payout run is the ledger's provenance (and one run a week is
    # no weight), so a catch-up as of any date still finds the claims made before it.
    retention_days=None,
)
def weekly_payouts(ctx: RunContext) -> dict[str, Any]:
    """Pay every finished, unpaid week as of ``ctx.scheduled_for``.

    The rows' ``created_at`` is the clock time read here, at the edge, once: when the
    run wrote them. The business time is ``scheduled_for``, which decides what is paid.
    """
    now = clock.now()

    def on_batch(progress: BatchProgress) -> None:
        ctx.batch_done(progress)  # heartbeats; catch_up_payouts shows it as its progress
        logger.info(
            "payouts batch %s/%s: %s of %s restaurants, %s payouts written",
            progress.batches_done,
            progress.batches,
            progress.restaurants_done,
            progress.restaurants,
            progress.written,
        )

    result = payouts_pay_due(
        as_of=ctx.scheduled_for,
        fence=ctx.fence,
        job_run_id=ctx.run_id,
        now=now,
        restaurant_ids=payout_subject_parse(ctx.subject),
        on_batch=on_batch,
        batch_size=settings.PAYOUT_BATCH_SIZE,
    )
    # The transfers this run wrote leave now, not at the next minute's tick.
    transfers_send_soon(now=clock.now())
    totals = payout_totals(payouts=payouts_of_run(run_id=ctx.run_id))
    return {
        "as_of": ctx.scheduled_for.isoformat(),
        "restaurants": result.restaurants,
        "batches": result.batches,
        "payouts_written": result.written,
        "gross": str(totals.gross),
        "commission": str(totals.commission),
        "net": str(totals.net),
    }


@invariant
def payout_ledger(window: CheckWindow) -> list[Problem]:
    """The ledger invariant (``payouts.selectors.ledger_problems``) as problems of the
    missed-run check, one per restaurant and instant. Completeness is judged as of the
    latest successful scheduled run (weeks finished after it are not due yet); amounts are
    summed for the payouts written in the check's window (the full sum reads every order)."""
    latest = payout_paid_as_of()
    return [
        Problem(
            ProblemKind.INVARIANT,
            PAYOUT_JOB,
            problem.at,
            f"restaurant:{problem.restaurant_id}",
            None,
            f"payout ledger: {problem.detail}",
        )
        for problem in ledger_problems(paid_as_of=latest, written_since=window.start)
    ]
