"""Reads of the payout ledger: a run's payouts, totals, a dry run, the orders a payout
covers, and the weekly table the demo prints. Keyword-only functions; no writes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from django.db.models import Count, QuerySet, Sum

from orders.models import Order, OrderStatus
from payouts import sql
from payouts.models import Payout
from payouts.services import payout_batches, payout_restaurant_ids, payout_weeks_due

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
    for batch in payout_batches(ids=ids, restricted=restaurant_ids is not None):
        preview += sql.payouts_select_due(batch=batch, weeks=payout_weeks_due(batch=batch, as_of=as_of))
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


CSV_HEADER = (
    "payout_id",
    "restaurant_id",
    "restaurant",
    "timezone",
    "week_start_local",
    "period_start_utc",
    "period_end_utc",
    "hours",
    "order_count",
    "gross",
    "commission",
    "net",
    "job_run_id",
    "fence",
    "created_at_utc",
)
# A spreadsheet runs a cell that starts with one of these as a formula.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def payout_csv_rows(*, payouts: QuerySet[Payout]) -> Iterator[list[str]]:
    """The header, then one row per payout of ``payouts``, streamed from the database."""
    yield list(CSV_HEADER)
    for payout in payouts.select_related("restaurant").order_by("period_start", "restaurant_id").iterator(2000):
        yield [
            str(payout.pk),
            str(payout.restaurant_id),
            _cell(payout.restaurant.name),
            payout.restaurant.timezone,
            payout.week_start_local.isoformat(),
            payout.period_start.isoformat(),
            payout.period_end.isoformat(),
            f"{(payout.period_end - payout.period_start).total_seconds() / 3600:g}",
            str(payout.order_count),
            str(payout.gross),
            str(payout.commission),
            str(payout.net),
            "" if payout.job_run_id is None else str(payout.job_run_id),
            "" if payout.fence is None else str(payout.fence),
            payout.created_at.isoformat(),
        ]


def _cell(text: str) -> str:
    # Names come from people: defuse formula injection when the file is opened in Excel.
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def payout_week_choices(*, count: int) -> list[date]:
    """The latest ``count`` local Mondays, counting back from the newest payout's week.

    Mondays are regular, so this needs one row (ORDER BY period_start DESC LIMIT 1,
    served by payout_period_start), not a DISTINCT over the whole ledger.
    """
    latest = Payout.objects.order_by("-period_start").values_list("week_start_local", flat=True).first()
    if latest is None:
        return []
    return [latest - timedelta(weeks=back) for back in range(count)]


def payouts_of_week(*, payouts: QuerySet[Payout], monday: date) -> QuerySet[Payout]:
    """``payouts`` of the business week starting on local ``monday``, in every zone.

    A local Monday 00:00 is within 14 hours of Monday 00:00 UTC in any zone, so the
    period_start range lets payout_period_start serve the filter.
    """
    around = datetime.combine(monday, time(), tzinfo=UTC)
    return payouts.filter(
        week_start_local=monday,
        period_start__gte=around - timedelta(days=1),
        period_start__lt=around + timedelta(days=1),
    )
