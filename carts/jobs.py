"""The nightly cart clean-up.

At 02:00 UTC; after an outage only the latest missed night runs (the older ones are
recorded as coalesced: one clean-up as of the latest night deletes everything they
would have), and a night that comes while the previous clean-up is still going is
skipped rather than run beside it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings

from carts.models import CLEAN_CARTS_JOB
from carts.selectors import cart_stale_cutoff
from carts.services import carts_delete_stale
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.registry import job


@job(
    CLEAN_CARTS_JOB, cron="0 2 * * *", timezone="UTC", misfire=Misfire.COALESCE, overlap=Overlap.FORBID, heartbeat=True
)
def clean_carts(ctx: RunContext) -> dict[str, Any]:
    """Delete carts untouched for CART_STALE_DAYS before ``ctx.scheduled_for``.

    No fence: deleting a stale cart twice is harmless, and every delete re-checks that
    the cart is still stale, so a late or repeated run deletes nothing it should not.
    """
    cutoff = cart_stale_cutoff(as_of=ctx.scheduled_for, stale_after=timedelta(days=settings.CART_STALE_DAYS))
    # batch_done heartbeats: it raises RunLostError if this worker lost the run.
    result = carts_delete_stale(cutoff=cutoff, batch_size=settings.CART_CLEANUP_BATCH_SIZE, on_batch=ctx.batch_done)
    return {
        "cutoff": cutoff.isoformat(),
        "deleted_carts": result.carts,
        "deleted_items": result.items,
        "batches": result.batches,
    }
