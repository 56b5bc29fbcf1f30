"""The weekly payout job.

``30 20 * * 0`` in UTC is 02:00 on Monday in India. Missed ticks are caught up one by
one (each pays what was finished as of its own tick, so a late run pays exactly what the
on-time run would have), and a tick that comes while a run is still going waits for it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, NoReturn

from django.conf import settings

from operations.alerts import problems_deliver
from operations.monitoring import CheckWindow, Problem, invariant
from payouts.errors import RestaurantsUnpaidError
from payouts.models import PAYOUT_JOB
from payouts.selectors import (
    ledger_problems,
    payout_ledger_start,
    payout_paid_as_of,
    payout_totals,
    payouts_of_run,
)
from payouts.services import (
    BatchProgress,
    PayoutPassResult,
    payout_pass_check_complete,
    payout_subject_parse,
    payouts_pay_due,
)
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap, ProblemKind
from scheduling.registry import job
from tiffin import clock

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
    # A backfilled tick pays nothing the next scheduled run would not (each pays every
    # finished week), and queued before that run it only delays the money.
    backfill_refused=(
        "each scheduled run pays every finished, unpaid week, so backfilled runs would only wait in line "
        "before it; to pay now, run manage.py catch_up_payouts"
    ),
    earliest=payout_ledger_start,
)
def weekly_payouts(ctx: RunContext) -> dict[str, Any]:
    """Pay every finished, unpaid week as of ``ctx.scheduled_for``.

    The rows' ``created_at`` is the clock time read here, at the edge, once: when the
    run wrote them. The business time is ``scheduled_for``, which decides what is paid.
    A restaurant the database refuses to pay is isolated and the others are paid; the
    run then ends failed, naming it (``_unpaid_fail``). A pass that left a ledger far
    behind ends the run failed too, naming it (``payout_pass_check_complete``), so it is
    retried rather than called a success.
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

    restaurant_ids = payout_subject_parse(ctx.subject)
    result = payouts_pay_due(
        as_of=ctx.scheduled_for,
        run=ctx,  # each batch calls ctx.fence_check(PAYOUT_FENCE_RESOURCE) before it writes
        now=now,
        restaurant_ids=restaurant_ids,
        on_batch=on_batch,
        batch_size=settings.PAYOUT_BATCH_SIZE,
    )
    if result.unpaid:
        _unpaid_fail(ctx, result=result, now=now)
    payout_pass_check_complete(restaurant_ids=restaurant_ids, as_of=ctx.scheduled_for, written=result.written)
    totals = payout_totals(payouts=payouts_of_run(run_id=ctx.run_id))
    return {
        "as_of": ctx.scheduled_for.isoformat(),
        "restaurants": result.restaurants,
        "batches": result.batches,
        "payouts_written": result.written,  # by this attempt
        # The amounts below are of every payout of the run, by every attempt (one killed
        # mid-run leaves its committed batches to the run): this many.
        "payouts_of_run": totals.count,
        "gross": str(totals.gross),
        "commission": str(totals.commission),
        "net": str(totals.net),
    }


def _unpaid_fail(ctx: RunContext, *, result: PayoutPassResult, now: datetime) -> NoReturn:
    """End the run failed after paying the others: its status says the job is not done
    and its error names whom and why; the engine retries it (a restaurant whose data was
    fixed is paid then; the others, paid already, are not paid again) and the missed-run
    check alerts it as retrying, then dead. The people are told now, on the first attempt
    only (the retries would repeat it): one problem per restaurant, by every channel."""
    unpaid = [(restaurant.restaurant_id, restaurant.reason) for restaurant in result.unpaid]
    if ctx.attempt <= 1:
        problems_deliver(
            problems=[
                Problem(
                    ProblemKind.INVARIANT,
                    PAYOUT_JOB,
                    ctx.scheduled_for,
                    f"restaurant:{restaurant_id}",
                    ctx.run_id,
                    f"payout ledger: restaurant {restaurant_id} could not be paid: {reason}",
                )
                for restaurant_id, reason in unpaid
            ],
            now=now,
        )
    raise RestaurantsUnpaidError(as_of=ctx.scheduled_for.isoformat(), unpaid=unpaid, written=result.written)


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
