"""What the outbox tests share (tests/integration/test_transfers.py, test_statements.py):
the payout run whose rows they send, the sender's clock, a row's next attempt, and a run
of the sender job."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import time_machine
from django.db.models import Model

from orders.models import OrderStatus, Restaurant
from scheduling.execution import runs_execute
from scheduling.models import JobRun, RunStatus
from scheduling.services import run_claim_manual
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


def sender_run(job_name: str, *, scheduled_for: datetime, at: datetime) -> JobRun:
    """A run of the sender job ``job_name`` for ``scheduled_for``, claimed by hand at
    PAID_AT and executed here as a worker executes it, at ``at``; it succeeded."""
    with time_machine.travel(at, tick=False):
        run = run_claim_manual(job_name=job_name, scheduled_for=scheduled_for, now=PAID_AT, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return run
