"""Stale-order cancellation: a delayed run per order, and a safety net.

Every order gets a ``cancel-stale-order`` run when it is placed (``orders.services.
order_place``), due when the restaurant's time to answer is up. Due runs are handed to a
worker in batches, and one UPDATE cancels those of their orders still ``placed``.

``cancel-stale-orders`` runs every five minutes for orders whose run is missing or dead.
A tick more than four minutes late is skipped (the next one is at most a minute away),
and a tick that comes while the previous pass is still going is skipped too.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from orders.models import CANCEL_STALE_ORDER_JOB, CANCEL_STALE_ORDERS_JOB
from orders.services import order_id_from_subject, orders_cancel_overdue, orders_cancel_unaccepted
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.registry import job

logger = logging.getLogger(__name__)


@job(CANCEL_STALE_ORDER_JOB, delayed=True, batch_size=200, max_attempts=5, backoff_seconds=10)
def cancel_stale_order(batch: list[RunContext]) -> dict[str, Any]:
    """Cancel the orders of a batch of due runs that are still ``placed``.

    No fence: cancelling an order that is still unaccepted is harmless twice, and the
    UPDATE re-checks the status, so a repeated or late run changes nothing it should not.
    Each run is due at its order's deadline; whether that deadline has passed, and
    ``cancelled_at``, come from the database's clock, never this worker's: a run handed
    out early (a scheduler whose clock runs ahead) leaves the order alone, and the
    safety net cancels it after its deadline.
    """
    order_ids, unrecognised = _order_ids(batch)
    cancelled = orders_cancel_unaccepted(order_ids=order_ids)
    return {
        "orders": len(order_ids),
        "cancelled": cancelled,
        "left_alone": len(order_ids) - cancelled,
        "unrecognised_subjects": unrecognised,
    }


def _order_ids(batch: list[RunContext]) -> tuple[list[int], list[str]]:
    """The batch's order ids, and the subjects that name no order: one bad run must not
    fail (and keep retrying) the whole batch of real cancellations it shares a task with."""
    order_ids: list[int] = []
    unrecognised: list[str] = []
    for ctx in batch:
        try:
            order_ids.append(order_id_from_subject(ctx.subject))
        except ValueError:
            logger.warning("cancel-stale-order run %s has subject %r, which names no order", ctx.run_id, ctx.subject)
            unrecognised.append(ctx.subject)
    return order_ids, unrecognised


@job(
    CANCEL_STALE_ORDERS_JOB,
    cron="*/5 * * * *",
    timezone="UTC",
    misfire=Misfire.DEADLINE,
    misfire_deadline_seconds=240,
    overlap=Overlap.FORBID,
)
def cancel_stale_orders(ctx: RunContext) -> dict[str, Any]:
    """Cancel orders past their deadline (by the database's clock) whose run is missing or dead."""
    cancelled = orders_cancel_overdue(batch_size=settings.ORDER_CANCEL_BATCH_SIZE)
    return {"as_of": ctx.scheduled_for.isoformat(), "cancelled": cancelled}
