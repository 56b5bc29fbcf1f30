"""Id lists passed to SQL as one parameter (tiffin.db): the literal, the ORM lookup and the
raw condition select exactly the rows named, on either database, and refuse a non-integer."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db.models import F

from orders.models import Order, Restaurant
from scheduling.models import JobRun
from scheduling.sql import job_of_runs
from tiffin.db import AnyOf, fetch, id_in, int_array

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def test_the_literal_holds_each_integer_and_null():
    assert int_array([3, 1, None, 2**62]) == "{3,1,NULL,4611686018427387904}"
    assert int_array([]) == "{}"
    assert int_array(n for n in (7, 8)) == "{7,8}"


def test_the_literal_refuses_what_is_not_an_integer():
    with pytest.raises(ValueError):
        int_array(["1}; DROP TABLE orders; {"])  # type: ignore[list-item]


@pytest.fixture
def orders() -> list[Order]:
    restaurant = Restaurant.objects.create(
        name="Dosa Darbar", timezone="Asia/Kolkata", commission_rate=Decimal("0.15"), onboarded_at=NOW
    )
    return [Order.objects.create(restaurant=restaurant, total=Decimal("10.00"), placed_at=NOW) for _ in range(5)]


@pytest.mark.django_db
def test_any_of_selects_exactly_the_ids_given(orders: list[Order]):
    chosen = [orders[3].id, orders[0].id, orders[3].id, 10**12]  # a repeat and a missing id
    found = Order.objects.filter(AnyOf(F("id"), chosen)).order_by("id").values_list("id", flat=True)
    assert list(found) == [orders[0].id, orders[3].id]
    assert not Order.objects.filter(AnyOf(F("id"), [])).exists()
    # With other conditions, and in an UPDATE, as id__in would be.
    changed = Order.objects.filter(AnyOf(F("id"), chosen), total=Decimal("10.00")).update(total=Decimal("11.00"))
    assert changed == 2
    assert sorted(Order.objects.filter(total=Decimal("11.00")).values_list("id", flat=True)) == sorted({*chosen[:2]})


@pytest.mark.django_db
def test_id_in_selects_integer_ids_and_names(orders: list[Order]):
    condition, params = id_in("id", [orders[1].id, orders[4].id])
    rows = fetch(f"SELECT id FROM {Order._meta.db_table} WHERE {condition} ORDER BY id", params)
    assert [row[0] for row in rows] == [orders[1].id, orders[4].id]
    condition, params = id_in("name", ["Dosa Darbar", "Elsewhere"])
    assert fetch(f"SELECT count(*) FROM {Restaurant._meta.db_table} WHERE {condition}", params) == [(1,)]


@pytest.mark.django_db
def test_job_of_runs_names_the_job_or_none():
    run = JobRun.objects.create(
        job_name="orders.cancel_stale", scheduled_for=NOW, due_at=NOW, created_at=NOW, status="enqueued",
        trigger="delayed",
    )  # fmt: skip
    assert job_of_runs([10**12, run.id]) == "orders.cancel_stale"
    assert job_of_runs([10**12]) is None
