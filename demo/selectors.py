"""Reads that span the apps: the demo summary. Each part comes from its app's selectors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from carts.selectors import CartFreshness, cart_freshness
from orders.selectors import order_counts_by_status, order_delivered_gross_total, restaurant_counts_by_timezone
from payouts.models import Payout
from payouts.selectors import PayoutTotals, payout_totals


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


def demo_summary_get(*, now: datetime, stale_after: timedelta) -> DemoSummary:
    return DemoSummary(
        as_of=now,
        restaurants_by_zone=restaurant_counts_by_timezone(),
        orders_by_status=order_counts_by_status(),
        delivered_gross=order_delivered_gross_total(),
        carts=cart_freshness(as_of=now, stale_after=stale_after),
        stale_after=stale_after,
        payouts=payout_totals(payouts=Payout.objects.all()),
    )
