"""Reads of restaurants and orders. Functions with keyword-only arguments; no writes."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Sum

from orders.models import CANCEL_STALE_ORDER_JOB, STALE_CANCEL_REASON, Order, OrderStatus, Restaurant
from scheduling.models import JobRun
from tiffin.money import cents


def order_status_get(*, order_id: int) -> str | None:
    """The order's status as stored now, or None when there is no such order."""
    return Order.objects.filter(pk=order_id).values_list("status", flat=True).first()


def restaurants_by_id(*, restaurant_ids: Iterable[int]) -> dict[int, Restaurant]:
    return Restaurant.objects.in_bulk(set(restaurant_ids))


def restaurant_paid_through(*, restaurant_id: int) -> datetime | None:
    """Where the restaurant's payouts end (its contiguous ledger's end), or None when it
    has none yet: the newest row of the unique index (restaurant_id, period_start)."""
    return Restaurant(pk=restaurant_id).payouts.order_by("-period_start").values_list("period_end", flat=True).first()


def restaurant_rate_at(*, restaurant: Restaurant, at: datetime) -> Decimal:
    """The commission rate in force at ``at``: the latest change at or before it, else
    the onboarding rate (the rule the payout SQL applies to each period's start)."""
    change = restaurant.rate_changes.filter(effective_from__lte=at).order_by("-effective_from").first()
    return change.rate if change is not None else restaurant.commission_rate


def restaurant_counts_by_timezone() -> dict[str, int]:
    rows = Restaurant.objects.order_by("timezone").values("timezone").annotate(n=Count("id"))
    return {row["timezone"]: row["n"] for row in rows}


def order_counts_by_status() -> dict[str, int]:
    """Orders per status, every status present (zero when none), in the enum's order."""
    rows = Order.objects.order_by().values("status").annotate(n=Count("id"))
    found = {row["status"]: row["n"] for row in rows}
    return {status.value: found.get(status.value, 0) for status in OrderStatus}


def order_delivered_gross_total() -> Decimal:
    """Sum of the totals of delivered orders, in cents (``tiffin.money.cents``)."""
    return cents(Order.objects.filter(status=OrderStatus.DELIVERED).aggregate(total=Sum("total"))["total"])


def order_cancellations_overview() -> dict[str, int]:
    """The stale-order cancellation at a glance: orders it cancelled, and its delayed
    runs by status (``runs_<status>``)."""
    runs = JobRun.objects.filter(job_name=CANCEL_STALE_ORDER_JOB).order_by().values("status").annotate(n=Count("id"))
    cancelled = Order.objects.filter(status=OrderStatus.CANCELLED, cancel_reason=STALE_CANCEL_REASON).count()
    return {"cancelled_not_accepted_in_time": cancelled, **{f"runs_{row['status']}": row["n"] for row in runs}}
