"""``manage.py demo_summary``: what is in the database, for people (or ``--json``)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from tiffin import clock
from tiffin.selectors import DemoSummary, demo_summary_get


class Command(BaseCommand):
    help = "Summarise restaurants, orders, carts and payouts in the database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    def handle(self, *args: Any, **options: Any) -> None:
        summary = demo_summary_get(now=clock.now(), stale_after=timedelta(days=settings.CART_STALE_DAYS))
        if options["json"]:
            self.stdout.write(json.dumps(summary.as_json(), indent=2))
        else:
            self.stdout.write("\n".join(render_text(summary)))


def render_text(summary: DemoSummary) -> list[str]:
    zones = ", ".join(f"{zone} {n}" for zone, n in summary.restaurants_by_zone.items()) or "none"
    width = max(len(status) for status in summary.orders_by_status)
    lines = [
        f"Tiffin summary as of {summary.as_of:%Y-%m-%d %H:%M} UTC",
        f"Restaurants: {sum(summary.restaurants_by_zone.values())} ({zones})",
        f"Orders: {sum(summary.orders_by_status.values())}",
        *(f"  {status:<{width}}  {n:>8}" for status, n in summary.orders_by_status.items()),
        f"Delivered gross: {summary.delivered_gross}",
        f"Carts: {summary.carts.fresh + summary.carts.stale} ({summary.carts.fresh} fresh, "
        f"{summary.carts.stale} untouched for over {summary.stale_after.days} days)",
    ]
    payouts = summary.payouts
    if payouts.count:
        lines.append(
            f"Payouts: {payouts.count} (gross {payouts.gross}, commission {payouts.commission}, net {payouts.net})"
        )
    else:
        lines.append("Payouts: none yet")
    return lines
