"""The ledger's TRUNCATE guard (PostgreSQL, migration payouts/0010_ledger_truncate_guard):
TRUNCATE fires no row trigger, so a statement trigger refuses it on the payouts, the
orders and the rate changes unless the transaction set ``tiffin.ledger_wipe``, which only
``payouts.services.ledger_wipe`` (development settings, an explicit opt-in) does.

This process's connections allow it for Django's flush between tests (tests/conftest.py):
each test here turns it off for its own transaction first, as every other connection has it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from orders.models import Order, Restaurant
from payouts.errors import PayoutError
from payouts.models import Payout
from payouts.services import ledger_wipe

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

START = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture
def paid(restaurant, order_factory):
    order_factory("delivered", restaurant=restaurant, placed_at=START + timedelta(hours=12))
    return Payout.objects.create(
        restaurant=restaurant, period_start=START, period_end=START + timedelta(weeks=1),
        week_start_local=START.date(), gross=Decimal("24.50"), commission=Decimal("3.68"), net=Decimal("20.82"),
        order_count=1, created_at=START + timedelta(weeks=1), commission_rate=Decimal("0.15"),
        tzdata_version="2026f",
    )  # fmt: skip


@pytest.mark.parametrize("table", ["payouts_payout", "orders_order", "orders_commissionratechange"])
def test_a_truncate_of_the_ledger_is_refused_whatever_path_sends_it(paid, table):
    refused = pytest.raises(DatabaseError, match=f"TRUNCATE of {table} refused")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL tiffin.ledger_wipe = 'off'")
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"TRUNCATE {table} CASCADE")
    assert (Payout.objects.count(), Order.objects.count()) == (1, 1)


def test_the_development_wipe_passes_the_guard_and_takes_the_orders_with_the_payouts(paid):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL tiffin.ledger_wipe = 'off'")
        with pytest.raises(PayoutError, match="outside development settings"):
            ledger_wipe(development=False, delete_payouts=True)
        wiped = ledger_wipe(development=True, delete_payouts=True)
    assert (wiped.payouts, wiped.orders, wiped.restaurants) == (1, 1, 1)
    assert (Payout.objects.count(), Order.objects.count(), Restaurant.objects.count()) == (0, 0, 0)
