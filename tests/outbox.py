"""What the outbox tests share (tests/integration/test_transfers.py, test_statements.py):
the payout run whose rows they send, the sender's clock, and a row's next attempt."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Model

from orders.models import OrderStatus, Restaurant
from tests.engine import pay

# A tick of weekly-payouts (Sunday 20:30 UTC): the Kolkata weeks of 1, 8 and 15 March 2027
# are finished and settled.
AS_OF = datetime(2027, 3, 21, 20, 30, tzinfo=UTC)
PAID_AT = AS_OF + timedelta(minutes=5)  # pay()'s clock: the outbox rows' created_at


class Clock:
    """The sender's clock: a fixed instant the test moves."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, **delta: float) -> None:
        self.at += timedelta(**delta)


def paid_restaurants(
    restaurant_factory: Any,
    order_factory: Any,
    *,
    count: int,
    orders: Callable[[int], Sequence[tuple[int, str]]],
    fields: Callable[[Restaurant], dict[str, str]],
) -> list[Restaurant]:
    """``count`` Kolkata restaurants onboarded on 1 March 2027, restaurant number ``n``
    with ``fields(restaurant)`` set and one delivered order per ``(day of March, total)``
    of ``orders(n)`` (none in the week of 1 March: a zero payout); then the weekly-payouts
    run as of AS_OF, on a clock at PAID_AT."""
    restaurants = []
    for number in range(count):
        restaurant = restaurant_factory(onboarded_at=datetime(2027, 3, 1, tzinfo=UTC))
        Restaurant.objects.filter(id=restaurant.id).update(**fields(restaurant))
        for day, total in orders(number):
            delivered = datetime(2027, 3, day, 12, tzinfo=UTC)
            order_factory(
                OrderStatus.DELIVERED,
                restaurant=restaurant,
                total=Decimal(total),
                placed_at=delivered - timedelta(minutes=2),
            )
        restaurants.append(restaurant)
    pay(AS_OF, clock_at=PAID_AT)
    return restaurants


def due_again(row: Model) -> datetime:
    """When ``row`` (an outbox row) is due again, as the database holds it now."""
    row.refresh_from_db()
    due: datetime | None = getattr(row, "next_attempt_at")  # noqa: B009 (any outbox model)
    assert due is not None
    return due
