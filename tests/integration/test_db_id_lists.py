"""Id lists passed to SQL as one parameter (tiffin.db.id_in): the condition selects exactly
the rows named, on either database."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from orders.models import Order, Restaurant
from scheduling.models import JobRun
from scheduling.sql import job_of_runs
from tiffin.db import fetch, id_in

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def orders() -> list[Order]:
    restaurant = Restaurant.objects.create(
        name="Dosa Darbar", timezone="Asia/Kolkata", commission_rate=Decimal("0.15"), onboarded_at=NOW
    )
    return [Order.objects.create(restaurant=restaurant, total=Decimal("10.00"), placed_at=NOW) for _ in range(5)]


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
        trigger="delayed", enqueued_at=NOW,
    )  # fmt: skip
    assert job_of_runs([10**12, run.id]) == "orders.cancel_stale"
    assert job_of_runs([10**12]) is None
