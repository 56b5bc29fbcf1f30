"""Ledger data the services now refuse to write, as an older database may still hold it."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection

from orders.models import Order, OrderStatus, Restaurant


def written_unguarded(restaurant: Restaurant, *, delivered_at: datetime, total: str) -> Order:
    """A delivered order as a database may hold one from before the ledger's guards (a
    bulk import, an older release), such as one before its restaurant's onboarding:
    written with PostgreSQL's triggers off (the replica role, for the rest of the
    caller's transaction only, then back on); SQLite has no triggers."""
    postgresql = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if postgresql:
            cursor.execute("SET LOCAL session_replication_role = replica")
        order = Order.objects.create(
            restaurant=restaurant,
            customer_ref="imported",
            status=OrderStatus.DELIVERED,
            total=Decimal(total),
            placed_at=delivered_at - timedelta(minutes=30),
            accepted_at=delivered_at - timedelta(minutes=25),
            delivered_at=delivered_at,
        )
        if postgresql:
            cursor.execute("SET LOCAL session_replication_role = origin")
    return order
