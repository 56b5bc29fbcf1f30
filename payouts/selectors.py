"""Reads of the payout ledger: a run's payouts, totals, a dry run, the orders a payout
covers, and the weekly table the demo prints. Keyword-only functions; no writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_EVEN, Decimal

from django.db.models import Count, QuerySet, Sum

from orders.models import Order, OrderStatus
from payouts import sql
from payouts.models import Payout
from payouts.services import RESTAURANTS_PER_BATCH, payout_restaurant_ids, payout_weeks_due

CENT = Decimal("0.01")


@dataclass(frozen=True)
class PayoutTotals:
    count: int
    order_count: int
    gross: Decimal
    commission: Decimal
    net: Decimal


def payout_totals(*, payouts: QuerySet[Payout]) -> PayoutTotals:
    """Count and sums of ``payouts`` (any filtered queryset), in cents.

    SQLite sums decimals in floating point; rounding to cents restores the exact sum for
    any realistic number of rows. PostgreSQL's sums are exact already.
    """
    row = payouts.order_by().aggregate(
        n=Count("id"), orders=Sum("order_count"), gross=Sum("gross"), commission=Sum("commission"), net=Sum("net")
    )
    return PayoutTotals(
        count=row["n"],
        order_count=row["orders"] or 0,
        gross=_cents(row["gross"]),
        commission=_cents(row["commission"]),
        net=_cents(row["net"]),
    )


def _cents(value: Decimal | None) -> Decimal:
    return (value or Decimal("0")).quantize(CENT, rounding=ROUND_HALF_EVEN)


def payouts_of_run(*, run_id: int) -> QuerySet[Payout]:
    """The payouts one run wrote, by week and restaurant (served by the job_run FK index)."""
    return (
        Payout.objects.filter(job_run_id=run_id)
        .select_related("restaurant")
        .order_by("week_start_local", "restaurant__name", "restaurant_id")
    )


def payouts_preview(*, as_of: datetime, restaurant_ids: Sequence[int] | None) -> list[sql.DuePayout]:
    """What a pass as of ``as_of`` would pay now, computed by the same SQL, written nowhere."""
    ids = payout_restaurant_ids(restaurant_ids=restaurant_ids)
    preview: list[sql.DuePayout] = []
    for start in range(0, len(ids), RESTAURANTS_PER_BATCH):
        batch = ids[start : start + RESTAURANTS_PER_BATCH]
        weeks = payout_weeks_due(restaurant_ids=batch, as_of=as_of)
        preview += sql.payouts_select_due(restaurant_ids=batch, weeks=weeks)
    return sorted(preview, key=lambda due: (due.week_start_local, due.restaurant_id))


def payout_covered_orders(*, payout: Payout) -> QuerySet[Order]:
    """The orders a payout covers: its restaurant's orders delivered inside its bounds.

    Orders are not stamped with their payout; the bounds are the definition (served by
    the partial index order_delivered_by_restaurant).
    """
    return Order.objects.filter(
        restaurant_id=payout.restaurant_id,
        status=OrderStatus.DELIVERED,
        delivered_at__gte=payout.period_start,
        delivered_at__lt=payout.period_end,
    ).order_by("delivered_at", "id")


@dataclass(frozen=True)
class WeekRow:
    restaurant: str
    timezone: str
    week_start_local: date
    order_count: int
    gross: Decimal
    net: Decimal


def payout_weeks_table(*, limit_weeks: int = 8) -> list[WeekRow]:
    """The payouts of the latest ``limit_weeks`` local weeks, by restaurant then week."""
    weeks = list(
        Payout.objects.order_by("-week_start_local").values_list("week_start_local", flat=True).distinct()[:limit_weeks]
    )
    rows = (
        Payout.objects.filter(week_start_local__in=weeks)
        .select_related("restaurant")
        .order_by("restaurant__timezone", "restaurant__name", "restaurant_id", "week_start_local")
    )
    return [
        WeekRow(
            restaurant=payout.restaurant.name,
            timezone=payout.restaurant.timezone,
            week_start_local=payout.week_start_local,
            order_count=payout.order_count,
            gross=payout.gross,
            net=payout.net,
        )
        for payout in rows
    ]
