"""Every statement about "these orders, if still placed" reads those orders' rows only, not
every pending order, even with the statistics PostgreSQL took when nothing was pending.

The trap this guards against: a partial index ``WHERE status = 'placed'`` keyed by
placed_at. Any statement that says ``status = 'placed'`` may use it, and the planner does
whenever the index's statistics say it is nearly empty (they were taken at a quiet hour, or
never). At a rush it holds thousands of orders, and each accept then scanned all of them,
filtering by id. The statements are the project's own, captured as they run, and explained
with their own parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from orders.errors import OrderDeadlineError
from orders.models import Order, OrderStatus, Restaurant
from orders.services import _overdue_order_ids, order_accept, order_reject, orders_cancel_unaccepted
from tests.plans import rows_read, statements_on
from tiffin import clock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=False)]

PENDING = 3000
NAMED = 20  # the most orders any statement below is about


@pytest.fixture
def pending() -> list[int]:
    """PENDING overdue placed orders, inserted after statistics taken with none pending."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL plans")
    restaurant = Restaurant.objects.create(
        name="Thali House", timezone="Europe/London", commission_rate=Decimal("0.10"), onboarded_at=clock.now()
    )
    placed_at = clock.now() - timedelta(hours=1)
    accepted = [
        Order(restaurant=restaurant, total=Decimal("9.00"), placed_at=placed_at, status=OrderStatus.ACCEPTED)
        for _ in range(200)
    ]
    Order.objects.bulk_create(accepted)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE orders_order")
    orders = Order.objects.bulk_create(
        Order(restaurant=restaurant, total=Decimal("9.00"), placed_at=placed_at + timedelta(milliseconds=n))
        for n in range(PENDING)
    )
    return [int(order.pk) for order in orders]


def _accept_refused(order_id: int) -> None:
    with pytest.raises(OrderDeadlineError):
        order_accept(order_id=order_id, now=clock.now())


@pytest.mark.parametrize(
    "call",
    [
        # The fixture's orders are overdue: the accept is refused, by the same probe.
        pytest.param(lambda ids: _accept_refused(ids[-1]), id="accept"),
        pytest.param(lambda ids: order_reject(order_id=ids[-2], now=clock.now()), id="reject"),
        pytest.param(lambda ids: orders_cancel_unaccepted(order_ids=ids[-NAMED:]), id="delayed-run-cancel"),
        pytest.param(lambda ids: _overdue_order_ids(limit=NAMED), id="safety-net-batch"),
    ],
)
def test_a_statement_about_some_pending_orders_reads_only_theirs(pending: list[int], call: Callable[[list[int]], Any]):
    for sql, params in statements_on("orders_order", lambda: call(pending)):
        scans = rows_read("orders_order", sql, params)
        assert scans, sql
        # Bounded by the orders the statement is about, not by the PENDING others.
        assert all(rows <= NAMED for _, rows in scans), (scans, sql)


def test_the_orders_stay_pending_for_the_safety_net(pending: list[int]):
    # The fixture's orders are really there and overdue: the safety net finds them, oldest first.
    assert _overdue_order_ids(limit=5) == sorted(pending)[:5]
