"""The payout ledger's invariants hold in the database itself, whatever the code above
it does: one payout per restaurant and week, net = gross - commission, a non-empty period."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from payouts.models import Payout

# Monday 2026-03-02 00:00 in Asia/Kolkata is Sunday 18:30 UTC.
WEEK_START = datetime(2026, 3, 1, 18, 30, tzinfo=UTC)
WEEK_END = WEEK_START + timedelta(weeks=1)


def payout(restaurant: Any, **fields: Any) -> Payout:
    values: dict[str, Any] = {
        "restaurant": restaurant,
        "period_start": WEEK_START,
        "period_end": WEEK_END,
        "week_start_local": date(2026, 3, 2),
        "gross": Decimal("1000.00"),
        "commission": Decimal("150.00"),
        "net": Decimal("850.00"),
        "order_count": 40,
        "commission_rate": Decimal("0.15"),
        "tzdata_version": "2026f",
        "created_at": WEEK_END + timedelta(hours=2),
    }
    values.update(fields)
    return Payout(**values)


def refused_by_the_database(candidate: Payout, constraint: str) -> None:
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        candidate.save()
    # PostgreSQL names every constraint; SQLite names CHECK constraints but lists the
    # columns of a UNIQUE one.
    if connection.vendor == "sqlite" and constraint == "payout_one_per_restaurant_week":
        constraint = "UNIQUE constraint failed: payouts_payout.restaurant_id, payouts_payout.period_start"
    assert constraint in str(refused.value)


@pytest.mark.django_db
def test_a_consistent_payout_is_stored(restaurant):
    payout(restaurant).save()
    assert Payout.objects.get().net == Decimal("850.00")


@pytest.mark.django_db
def test_a_second_payout_for_the_same_restaurant_and_week_is_refused(restaurant):
    payout(restaurant).save()
    refused_by_the_database(
        payout(restaurant, gross=Decimal("0"), commission=Decimal("0"), net=Decimal("0")),
        "payout_one_per_restaurant_week",
    )
    assert Payout.objects.count() == 1


@pytest.mark.django_db
def test_the_same_week_of_another_restaurant_is_allowed(restaurant_factory):
    payout(restaurant_factory()).save()
    payout(restaurant_factory()).save()
    assert Payout.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("net", [Decimal("850.01"), Decimal("1000.00"), Decimal("0")])
def test_a_net_that_is_not_gross_less_commission_is_refused(restaurant, net):
    refused_by_the_database(payout(restaurant, net=net), "payout_net_is_gross_less_commission")
    assert not Payout.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("end", [WEEK_START, WEEK_START - timedelta(seconds=1)])
def test_a_period_that_does_not_end_after_it_starts_is_refused(restaurant, end):
    refused_by_the_database(payout(restaurant, period_end=end), "payout_period_not_empty")
    assert not Payout.objects.exists()
