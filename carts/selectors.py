"""Reads of carts. Functions with keyword-only arguments; no writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q

from carts.models import Cart


@dataclass(frozen=True)
class CartFreshness:
    fresh: int
    stale: int  # untouched for longer than ``stale_after``: what the clean-up will delete


def cart_stale_cutoff(*, as_of: datetime, stale_after: timedelta) -> datetime:
    """Carts with ``updated_at`` strictly before this instant are stale."""
    return as_of - stale_after


def cart_freshness(*, as_of: datetime, stale_after: timedelta) -> CartFreshness:
    cutoff = cart_stale_cutoff(as_of=as_of, stale_after=stale_after)
    counts = Cart.objects.aggregate(
        stale=Count("id", filter=Q(updated_at__lt=cutoff)),
        fresh=Count("id", filter=Q(updated_at__gte=cutoff)),
    )
    return CartFreshness(fresh=counts["fresh"], stale=counts["stale"])
