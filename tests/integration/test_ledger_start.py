"""Where a ledger starts and how far a pass goes (issue 30, holes 2 and 4).

Hole 2: an order placed and delivered before its restaurant's onboarding was in no
payout, ever, while the dry run listed it as waiting; moving the onboarding later in the
admin stranded orders the same way. Placing and delivering now refuse an instant before
the onboarding, the database refuses such a delivery and such a move (PostgreSQL), and
the admin refuses the move with a form error.

Hole 4: a restaurant onboarded in 1975 got 2,600 payouts and a run that "succeeded" with
50 delivered orders unpaid. A pass now pays every finished week, and onboarding dates
are in a fixed range.

Each case is the issue's, step by step; after it the scenario oracle
(``tests/scenarios/ledger.py``: every due week paid once, every amount from the orders,
every delivered order inside the ledger covered) holds on PostgreSQL, and the ledger
invariant (``ledger_problems``) everywhere.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any, cast

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from orders.errors import LedgerError, OrderError
from orders.models import Order, OrderStatus, Restaurant
from orders.services import order_accept, order_deliver, order_place, restaurant_create
from payouts.models import Payout
from payouts.selectors import ledger_problems
from scheduling.models import JobRun, RunStatus
from tests.database_clock import database_clock_at
from tests.engine import pay
from tests.ledger_data import written_unguarded
from tests.scenarios.harness import ScenarioDatabase
from tests.scenarios.ledger import LEDGER_SEAMS, MISMATCHED_PAYOUTS, UNCOVERED_ORDERS, assert_ledger_correct

pytestmark = pytest.mark.django_db

TODAY = datetime(2026, 11, 4, 12, tzinfo=UTC)  # a Wednesday
NEXT_WEEK = datetime(2026, 11, 9, 9, tzinfo=UTC)  # Monday: the onboarding entered in the admin
TICK_22_NOV = datetime(2026, 11, 22, 20, 30, tzinfo=UTC)  # pays the week of 9 Nov


class _ThisTransaction:
    """The scenario oracle's database, read through the test's own connection (its
    transaction holds everything the test wrote)."""

    def rows(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(query, params)
            return cursor.fetchall()


def assert_independent_check(*, as_of: datetime) -> None:
    """The oracle on PostgreSQL (its SQL is PostgreSQL's), the invariant on both."""
    if connection.vendor == "postgresql":
        assert_ledger_correct(cast(ScenarioDatabase, _ThisTransaction()), as_of=as_of)
    assert ledger_problems(paid_as_of=None) == []


def deliver(restaurant: Restaurant, at: datetime, total: str = "10.00") -> Order:
    order = order_place(restaurant=restaurant, customer_ref="c", total=Decimal(total), now=at - timedelta(minutes=2))
    with database_clock_at(at - timedelta(minutes=1)):
        order_accept(order_id=order.pk, now=at - timedelta(minutes=1))
    return order_deliver(order_id=order.pk, now=at)


def _restaurant_form(*, name: str, onboarded_at: datetime, adding: bool) -> dict[str, str]:
    data = {
        "name": name,
        "timezone": "Europe/London",
        "onboarded_at_0": f"{onboarded_at:%Y-%m-%d}",
        "onboarded_at_1": f"{onboarded_at:%H:%M:%S}",
        "rate_changes-TOTAL_FORMS": "0",
        "rate_changes-INITIAL_FORMS": "0",
        "rate_changes-MIN_NUM_FORMS": "0",
        "rate_changes-MAX_NUM_FORMS": "1000",
    }
    if adding:  # read-only on the change page
        data |= {"commission_rate": "0.1500", "is_active": "on"}
    return data


def _catch_up(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("catch_up_payouts", *args, "--json", stdout=out)
    return cast(dict[str, Any], json.loads(out.getvalue()))


# --- Hole 2: orders before the ledger's start ------------------------------------------------


def test_an_80_order_today_for_next_weeks_onboarding_is_refused_and_nothing_is_left_unpaid(
    db, admin_client, admin_pages
):
    with time_machine.travel(TODAY, tick=False):
        added = admin_client.post(
            reverse("admin:orders_restaurant_add"),
            _restaurant_form(name="Next week", onboarded_at=NEXT_WEEK, adding=True),
        )
    assert added.status_code == 302
    restaurant = Restaurant.objects.get()
    with pytest.raises(OrderError, match="takes orders from its onboarding at 2026-11-09 09:00 UTC"):
        order_place(restaurant=restaurant, customer_ref="c", total=Decimal("80.00"), now=TODAY)
    assert not Order.objects.exists()
    with time_machine.travel(TODAY, tick=False):
        assert _catch_up("--dry-run", "--as-of", TODAY.isoformat())["waiting"] == []
    # From its onboarding on it takes orders, and they are paid.
    deliver(restaurant, datetime(2026, 11, 10, 12, tzinfo=UTC), "80.00")
    pay(TICK_22_NOV)
    [payout] = Payout.objects.filter(restaurant=restaurant)
    assert (payout.order_count, payout.gross) == (1, Decimal("80.00"))
    assert ledger_problems(paid_as_of=TICK_22_NOV) == []
    assert_independent_check(as_of=TICK_22_NOV)


def test_a_delivery_before_the_onboarding_is_refused(db):
    restaurant = restaurant_create(
        name="Moved", timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=TODAY
    )
    order = order_place(restaurant=restaurant, customer_ref="c", total=Decimal("80.00"), now=TODAY)
    with database_clock_at(TODAY + timedelta(minutes=1)):
        order_accept(order_id=order.pk, now=TODAY + timedelta(minutes=1))
    # Moved later from a shell (placed orders only: the database lets it).
    Restaurant.objects.filter(pk=restaurant.pk).update(onboarded_at=NEXT_WEEK)
    with pytest.raises(LedgerError, match="is onboarded at 2026-11-09 09:00 UTC, where its ledger starts"):
        order_deliver(order_id=order.pk, now=TODAY + timedelta(minutes=30))
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED


@pytest.mark.postgres
def test_the_database_refuses_a_delivery_before_the_onboarding():
    restaurant = restaurant_create(
        name="SQL", timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=NEXT_WEEK
    )
    placed = TODAY.isoformat()
    refused = pytest.raises(IntegrityError, match=r"restaurant \d+ is onboarded at .*, where its ledger starts")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, delivered_at, "
            "cancel_reason) VALUES (%s, 'c', 'delivered', 80.00, %s, %s, '')",
            [restaurant.pk, placed, placed],
        )
    assert not Order.objects.exists()


def _fifteen_delivered() -> Restaurant:
    restaurant = restaurant_create(
        name="Busy",
        timezone="Europe/London",
        commission_rate=Decimal("0.15"),
        onboarded_at=datetime(2026, 11, 2, tzinfo=UTC),
    )
    for n in range(15):
        deliver(restaurant, datetime(2026, 11, 2, 12, tzinfo=UTC) + timedelta(hours=7 * n), "329.95")
    return restaurant


def test_the_admin_refuses_to_move_the_onboarding_past_an_order(db, admin_client, admin_pages):
    restaurant = _fifteen_delivered()
    url = reverse("admin:orders_restaurant_change", args=[restaurant.pk])
    with time_machine.travel(TODAY, tick=False):
        refused = admin_client.post(url, _restaurant_form(name="Busy", onboarded_at=NEXT_WEEK, adding=False))
    assert refused.status_code == 200  # the form again, with the error
    assert "would leave it before the ledger&#x27;s start, never paid" in refused.content.decode()
    restaurant.refresh_from_db()
    assert restaurant.onboarded_at == datetime(2026, 11, 2, tzinfo=UTC)
    # Earlier is harmless: the ledger then starts before every order.
    earlier = datetime(2026, 10, 26, tzinfo=UTC)
    with time_machine.travel(TODAY, tick=False):
        moved = admin_client.post(url, _restaurant_form(name="Busy", onboarded_at=earlier, adding=False))
    assert moved.status_code == 302
    restaurant.refresh_from_db()
    assert restaurant.onboarded_at == earlier
    pay(TICK_22_NOV)
    assert Payout.objects.filter(restaurant=restaurant).count() == 3  # weeks of 26 Oct, 2 Nov, 9 Nov
    assert_independent_check(as_of=TICK_22_NOV)


@pytest.mark.postgres
def test_the_database_refuses_to_move_the_onboarding_past_a_delivery_or_once_paid():
    restaurant = _fifteen_delivered()
    with pytest.raises(IntegrityError, match=r"cannot move to .*, after orders it delivered"), transaction.atomic():
        Restaurant.objects.filter(pk=restaurant.pk).update(onboarded_at=NEXT_WEEK)
    pay(TICK_22_NOV)
    earlier = datetime(2026, 10, 26, tzinfo=UTC)
    with pytest.raises(IntegrityError, match="its onboarding cannot move once it has a payout"), transaction.atomic():
        Restaurant.objects.filter(pk=restaurant.pk).update(onboarded_at=earlier)
    assert_independent_check(as_of=TICK_22_NOV)


def test_the_dry_runs_waiting_orders_are_what_the_run_pays(db):
    restaurant = restaurant_create(
        name="Waiting", timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=TODAY
    )
    for day in (4, 10, 12):
        deliver(restaurant, datetime(2026, 11, day, 18, tzinfo=UTC), "30.00")
    # One written before the refusal existed, before the onboarding week: never payable.
    written_unguarded(restaurant, delivered_at=datetime(2026, 10, 20, 12, tzinfo=UTC), total="80.00")
    as_of = datetime(2026, 11, 22, 21, tzinfo=UTC)
    [waiting] = _catch_up("--dry-run", "--as-of", as_of.isoformat())["waiting"]
    assert (waiting["orders"], waiting["gross"]) == (3, "90.00")
    paid = _catch_up("--as-of", as_of.isoformat())
    assert paid["status"] == RunStatus.SUCCEEDED
    assert sum(Decimal(p["gross"]) for p in paid["payouts"]) == Decimal(waiting["gross"])
    assert _catch_up("--dry-run", "--as-of", as_of.isoformat())["waiting"] == []


# --- Hole 4: a catch-up that stopped early ---------------------------------------------------


@pytest.mark.parametrize(
    ("onboarded_at", "error"),
    [
        (datetime(1975, 1, 6, 12, tzinfo=UTC), "onboarding 1975-01-06 12:00 UTC is out of range"),
        (datetime(2207, 1, 6, 12, tzinfo=UTC), "onboarding 2207-01-06 12:00 UTC is out of range"),
        (datetime(2028, 1, 3, 12, tzinfo=UTC), "is more than 366 days ahead"),
    ],
)
def test_the_admin_refuses_an_onboarding_out_of_range(db, admin_client, admin_pages, onboarded_at, error):
    with time_machine.travel(TODAY, tick=False):
        response = admin_client.post(
            reverse("admin:orders_restaurant_add"),
            _restaurant_form(name="Old", onboarded_at=onboarded_at, adding=True),
        )
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Restaurant.objects.exists()


def test_every_path_refuses_an_onboarding_in_1975(db):
    old = datetime(1975, 1, 6, 12, tzinfo=UTC)
    with pytest.raises(ValidationError, match="onboarding 1975-01-06 12:00 UTC is out of range"):
        restaurant_create(name="Old", timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=old)
    with pytest.raises(IntegrityError), transaction.atomic():
        Restaurant.objects.create(
            name="Old", timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=old
        )
    assert not Restaurant.objects.exists()


@pytest.mark.postgres
def test_a_restaurant_onboarded_in_1975_is_paid_to_the_end_in_one_catch_up():
    """The issue's database: the row predates the range check (added NOT VALID, so it
    stays); every finished week since 1975 is paid by the first catch-up, orders included."""
    with connection.cursor() as cursor:  # as before migration orders/0005, in this test only
        cursor.execute("ALTER TABLE orders_restaurant DROP CONSTRAINT IF EXISTS restaurant_onboarded_in_range")
    old = Restaurant.objects.create(
        name="Since 1975", timezone="Europe/London", commission_rate=Decimal("0.15"),
        onboarded_at=datetime(1975, 1, 6, 12, tzinfo=UTC),
    )  # fmt: skip
    for n in range(50):  # after 2024-11-04, where the pass used to stop
        deliver(old, datetime(2024, 11, 11, 12, tzinfo=UTC) + timedelta(days=14 * n), "12.50")
    as_of = datetime(2026, 11, 2, 21, tzinfo=UTC)
    first = _catch_up("--as-of", as_of.isoformat())
    assert first["status"] == RunStatus.SUCCEEDED
    payouts = Payout.objects.filter(restaurant=old)
    assert payouts.order_by("-period_start").values_list("period_end", flat=True).first() == datetime(
        2026, 11, 2, tzinfo=UTC
    )
    assert sum(p.order_count for p in payouts) == 50
    assert sum(p.gross for p in payouts) == Decimal("625.00")
    assert_independent_check(as_of=as_of)
    second = _catch_up("--as-of", (as_of + timedelta(hours=1)).isoformat())
    assert (second["status"], second["payouts"]) == (RunStatus.SUCCEEDED, [])
    assert JobRun.objects.filter(job_name="weekly-payouts", status=RunStatus.SUCCEEDED).count() == 2


# --- The dry run refuses what the run refuses, and lists waiting orders by name ---------------


def test_the_dry_run_refuses_scattered_ids_exactly_as_the_run_does(db):
    restaurants = Restaurant.objects.bulk_create(
        Restaurant(name=f"R{n}", timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=TODAY)
        for n in range(800)
    )
    scattered = [str(r.pk) for r in restaurants[::2]]  # 400 ids, no two adjacent
    messages = []
    for dry in (["--dry-run"], []):
        with pytest.raises(CommandError) as refused:
            call_command("catch_up_payouts", *dry, "--restaurant", *scattered, stdout=StringIO())
        messages.append(str(refused.value))
    assert messages[0] == messages[1]
    assert "too many scattered restaurant ids for one catch-up" in messages[0]
    assert not JobRun.objects.exists()


def test_the_dry_run_lists_waiting_restaurants_by_name(db):
    names = ["Zeta", "Alpha", "Mu"]
    for name in names:
        restaurant = restaurant_create(
            name=name, timezone="Europe/London", commission_rate=Decimal("0.15"), onboarded_at=TODAY
        )
        deliver(restaurant, TODAY + timedelta(hours=1))
    waiting = _catch_up("--dry-run", "--as-of", (TODAY + timedelta(hours=2)).isoformat())["waiting"]
    assert [row["restaurant_name"] for row in waiting] == sorted(names)


# --- A zone change re-cuts a finished week not yet paid (docs/ledger.md) -----------------------


def test_a_zone_change_recuts_a_finished_unpaid_week_and_every_order_is_paid_once(db):
    restaurant = restaurant_create(
        name="Moving east",
        timezone="America/New_York",
        commission_rate=Decimal("0.15"),
        onboarded_at=datetime(2026, 11, 2, 5, tzinfo=UTC),
    )
    at = datetime(2026, 11, 2, 5, 30, tzinfo=UTC)
    while at < datetime(2026, 11, 16, 5, tzinfo=UTC):  # New York's weeks of 2 and 9 Nov
        deliver(restaurant, at)
        at += timedelta(hours=3)
    pay(datetime(2026, 11, 15, 20, 30, tzinfo=UTC))  # the week of 2 Nov
    # The week of 9 Nov (to 16 Nov 05:00 UTC) is over, unpaid, when the zone changes.
    Restaurant.objects.filter(pk=restaurant.pk).update(timezone="Asia/Kolkata")
    pay(TICK_22_NOV)
    bounds = list(
        Payout.objects.filter(restaurant=restaurant).order_by("period_start").values_list("period_start", "period_end")
    )
    assert bounds[1:] == [  # cut again at Kolkata's Mondays, from where the ledger was paid
        (datetime(2026, 11, 9, 5, tzinfo=UTC), datetime(2026, 11, 15, 18, 30, tzinfo=UTC)),
        (datetime(2026, 11, 15, 18, 30, tzinfo=UTC), datetime(2026, 11, 22, 18, 30, tzinfo=UTC)),
    ]
    delivered = Order.objects.filter(restaurant=restaurant, status=OrderStatus.DELIVERED)
    assert sum(p.order_count for p in Payout.objects.filter(restaurant=restaurant)) == delivered.count() == 112
    assert ledger_problems(paid_as_of=None) == []
    if connection.vendor == "postgresql":
        oracle = _ThisTransaction()
        assert oracle.rows(MISMATCHED_PAYOUTS) == oracle.rows(LEDGER_SEAMS) == oracle.rows(UNCOVERED_ORDERS) == []


def test_a_pass_that_stops_short_fails_and_says_why_and_its_retry_pays_the_rest(db, monkeypatch):
    """The net under the pass: with the week lists cut short again (at 1,000 weeks here;
    the cap was 2,600), the run that pays a ledger from 2000 ends failed, naming the
    restaurant, instead of succeeding with orders unpaid; the next run pays the rest."""
    import payouts.selectors
    from payouts.weeks import weeks_finished

    def cut_short(**kwargs: Any) -> list[Any]:
        return weeks_finished(**kwargs)[:1000]

    old = restaurant_create(
        name="Since 2000",
        timezone="Europe/London",
        commission_rate=Decimal("0.15"),
        onboarded_at=datetime(2000, 1, 3, 12, tzinfo=UTC),
    )
    deliver(old, datetime(2026, 10, 20, 12, tzinfo=UTC), "40.00")
    as_of = datetime(2026, 11, 2, 21, tzinfo=UTC)
    monkeypatch.setattr(payouts.selectors, "weeks_finished", cut_short)
    stopped = f"the pass stopped short: it wrote 1000 payouts, and restaurant {old.pk} still has finished weeks"
    with pytest.raises(CommandError, match=stopped):
        _catch_up("--as-of", as_of.isoformat())
    assert JobRun.objects.get(job_name="weekly-payouts").status == RunStatus.FAILED
    monkeypatch.undo()
    assert _catch_up("--as-of", (as_of + timedelta(minutes=1)).isoformat())["status"] == RunStatus.SUCCEEDED
    assert sum(p.gross for p in Payout.objects.filter(restaurant=old)) == Decimal("40.00")
    assert_independent_check(as_of=as_of)
