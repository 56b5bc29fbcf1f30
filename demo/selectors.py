"""Reads that span the apps: the demo summary. Each part comes from its app's selectors,
except the payout totals, which are small enough to read here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.db.models import Count, Sum

from carts.selectors import CartFreshness, cart_freshness
from orders.selectors import CENT, order_counts_by_status, order_delivered_gross_total, restaurant_counts_by_timezone
from payouts.models import Payout


@dataclass(frozen=True)
class PayoutTotals:
    count: int
    gross: Decimal
    commission: Decimal
    net: Decimal


@dataclass(frozen=True)
class DemoSummary:
    as_of: datetime
    restaurants_by_zone: dict[str, int]
    orders_by_status: dict[str, int]
    delivered_gross: Decimal
    carts: CartFreshness
    stale_after: timedelta
    payouts: PayoutTotals

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values: money as strings, so no reader turns it into a float."""
        return {
            "as_of": self.as_of.isoformat(),
            "restaurants": {"total": sum(self.restaurants_by_zone.values()), "by_zone": self.restaurants_by_zone},
            "orders": {"total": sum(self.orders_by_status.values()), "by_status": self.orders_by_status},
            "delivered_gross": str(self.delivered_gross),
            "carts": {
                "fresh": self.carts.fresh,
                "stale": self.carts.stale,
                "stale_after_days": self.stale_after.days,
            },
            "payouts": {
                "count": self.payouts.count,
                "gross": str(self.payouts.gross),
                "commission": str(self.payouts.commission),
                "net": str(self.payouts.net),
            },
        }


def payout_totals() -> PayoutTotals:
    """Count and sums of all payouts, rounded to cents as order_delivered_gross_total is."""
    row = Payout.objects.aggregate(n=Count("id"), gross=Sum("gross"), commission=Sum("commission"), net=Sum("net"))
    return PayoutTotals(
        count=row["n"], gross=_cents(row["gross"]), commission=_cents(row["commission"]), net=_cents(row["net"])
    )


def _cents(value: Decimal | None) -> Decimal:
    return (value or Decimal("0")).quantize(CENT, rounding=ROUND_HALF_EVEN)


def demo_summary_get(*, now: datetime, stale_after: timedelta) -> DemoSummary:
    return DemoSummary(
        as_of=now,
        restaurants_by_zone=restaurant_counts_by_timezone(),
        orders_by_status=order_counts_by_status(),
        delivered_gross=order_delivered_gross_total(),
        carts=cart_freshness(as_of=now, stale_after=stale_after),
        stale_after=stale_after,
        payouts=payout_totals(),
    )
