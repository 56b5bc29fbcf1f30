"""seed_demo: the same seed and --now give the same rows, it refuses a non-empty database
or bad input without writing, --reset starts over, and the data looks like a real week."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.management import CommandError, ManagementUtility, call_command

from carts.models import Cart, CartItem
from orders.models import Order, OrderStatus, Restaurant
from payouts.models import Payout

NOW = "2026-03-02T12:00:00Z"
NOW_DT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SMALL = ("--restaurants", "3", "--weeks", "1", "--now", NOW)


def seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def digest() -> str:
    """A hash of every seeded row by its natural values (ids differ from run to run)."""
    names = dict(Restaurant.objects.values_list("pk", "name"))
    restaurants = Restaurant.objects.values_list("name", "timezone", "commission_rate", "onboarded_at", "is_active")
    orders = Order.objects.values_list(
        "restaurant_id", "customer_ref", "status", "total", "placed_at", "accepted_at", "rejected_at",
        "delivered_at", "cancelled_at", "cancel_reason",
    )  # fmt: skip
    lines: dict[int, list[str]] = {}
    for cart_id, *item in CartItem.objects.values_list("cart_id", "sku", "quantity", "unit_price"):
        lines.setdefault(cart_id, []).append(repr(item))
    carts = [
        repr((ref, created, updated, sorted(lines.get(pk, []))))
        for pk, ref, created, updated in Cart.objects.values_list("pk", "customer_ref", "created_at", "updated_at")
    ]
    rows = [
        sorted(repr(row) for row in restaurants),
        sorted(repr((names[restaurant_id], *rest)) for restaurant_id, *rest in orders),
        sorted(carts),
    ]
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def counts() -> tuple[int, int, int, int]:
    return Restaurant.objects.count(), Order.objects.count(), Cart.objects.count(), CartItem.objects.count()


@pytest.fixture(autouse=True)
def development(settings):
    """seed_demo --reset deletes with development settings only (pytest-django runs with DEBUG off)."""
    settings.DEBUG = True


def a_payout(restaurant: Restaurant) -> Payout:
    return Payout.objects.create(
        restaurant=restaurant, period_start=NOW_DT - timedelta(weeks=1), period_end=NOW_DT,
        week_start_local=NOW_DT.date(), gross=Decimal("10.00"), commission=Decimal("1.50"), net=Decimal("8.50"),
        order_count=1, created_at=NOW_DT, commission_rate=Decimal("0.15"), tzdata_version="2026f",
    )  # fmt: skip


@pytest.mark.django_db
def test_the_same_seed_and_now_give_identical_data():
    seed(*SMALL, "--seed", "7")
    first, first_counts = digest(), counts()
    seed(*SMALL, "--seed", "7", "--reset")
    assert digest() == first
    assert counts() == first_counts
    assert first_counts[1] > 100  # not trivially equal: there are orders to compare


@pytest.mark.django_db
def test_a_different_seed_gives_different_data():
    seed(*SMALL, "--seed", "7")
    first = digest()
    seed(*SMALL, "--seed", "8", "--reset")
    assert digest() != first


@pytest.mark.django_db
def test_a_second_run_without_reset_is_refused_and_writes_nothing():
    seed(*SMALL)
    before, before_counts = digest(), counts()
    with pytest.raises(CommandError, match=r"not empty \(3 restaurants, \d+ orders, 120 carts\); pass --reset") as err:
        seed(*SMALL, "--seed", "99")
    assert err.value.returncode != 0
    assert (digest(), counts()) == (before, before_counts)


@pytest.mark.django_db(transaction=True)
def test_the_refusal_exits_non_zero_from_the_command_line(capsys):
    seed(*SMALL)
    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "seed_demo", *SMALL]).execute()
    assert exited.value.code == 1
    assert "pass --reset" in capsys.readouterr().err


@pytest.mark.django_db
def test_reset_with_the_explicit_opt_in_replaces_everything_including_payouts():
    seed(*SMALL, "--seed", "1")
    a_payout(Restaurant.objects.all()[0])
    output = seed(*SMALL, "--seed", "2", "--reset", "--delete-payouts")
    assert "Reset: deleted 1 payouts (net 8.50 paid), 3 restaurants" in output
    after_reset = digest()
    assert not Payout.objects.exists()
    # What is left is exactly a fresh seed-2 run: nothing of seed 1 survived.
    Order.objects.all().delete()
    Restaurant.objects.all().delete()
    Cart.objects.all().delete()
    seed(*SMALL, "--seed", "2")
    assert digest() == after_reset


@pytest.mark.django_db
def test_a_development_reset_of_a_database_with_payouts_needs_the_opt_in_and_names_them():
    seed(*SMALL, "--seed", "1")
    a_payout(Restaurant.objects.all()[0])
    before = (digest(), counts())
    with pytest.raises(
        CommandError, match=r"holds 1 payouts \(net 8.50 paid\), 3 restaurants, \d+ orders.*--delete-payouts"
    ):
        seed(*SMALL, "--reset")
    assert (digest(), counts(), Payout.objects.count()) == (*before, 1)


@pytest.mark.django_db
@pytest.mark.parametrize("opt_in", [(), ("--delete-payouts",)])
def test_outside_development_settings_a_reset_refuses_and_deletes_nothing(settings, opt_in):
    seed(*SMALL, "--seed", "1")
    a_payout(Restaurant.objects.all()[0])
    before = (digest(), counts())
    settings.DEBUG = False
    with pytest.raises(CommandError, match=r"outside development settings \(DEBUG is off\).*1 payouts") as err:
        seed(*SMALL, "--reset", *opt_in)
    assert err.value.returncode != 0
    assert (digest(), counts(), Payout.objects.count()) == (*before, 1)


@pytest.mark.django_db
def test_outside_development_settings_a_reset_refuses_even_without_payouts(settings):
    seed(*SMALL)
    before = (digest(), counts())
    settings.DEBUG = False
    with pytest.raises(CommandError, match=r"DEBUG is off\): this database holds 0 payouts .*, 3 restaurants"):
        seed(*SMALL, "--reset")
    assert (digest(), counts()) == before


@pytest.mark.django_db
def test_the_opt_in_goes_with_reset():
    with pytest.raises(CommandError, match="--delete-payouts goes with --reset"):
        seed(*SMALL, "--delete-payouts")
    assert counts() == (0, 0, 0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--now", "last tuesday"), "is not an ISO 8601 date-time"),
        (("--now", "2026-03-02T12:00:00"), "has no UTC offset"),
        (("--now", "2026-02-30T12:00:00Z"), "is not an ISO 8601 date-time"),
        (("--restaurants", "-1"), "--restaurants -1"),
        (("--restaurants", "0"), "--restaurants 0"),
        (("--weeks", "-3"), "--weeks -3"),
        (("--restaurants", "two"), "invalid int value"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message_and_writes_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        seed(*args)
    assert counts() == (0, 0, 0, 0)


@pytest.mark.django_db
def test_bad_input_is_refused_before_a_reset_deletes_anything():
    seed(*SMALL)
    before = digest()
    with pytest.raises(CommandError):
        seed("--reset", "--now", "soon")
    assert digest() == before


@pytest.mark.django_db
def test_now_defaults_to_the_clock_truncated_to_the_hour():
    with time_machine.travel(datetime(2026, 3, 2, 12, 34, 56, tzinfo=UTC), tick=False):
        output = seed("--restaurants", "3", "--weeks", "1")
    assert "before 2026-03-02T12:00:00+00:00" in output
    assert set(Restaurant.objects.values_list("onboarded_at", flat=True)) == {NOW_DT - timedelta(weeks=1)}
    assert max(Order.objects.values_list("placed_at", flat=True)) <= NOW_DT


@pytest.mark.django_db
def test_the_default_run_looks_like_weeks_of_real_business():
    output = seed("--now", NOW)
    restaurants = list(Restaurant.objects.all())
    orders = list(Order.objects.select_related("restaurant"))
    statuses = Counter(order.status for order in orders)

    assert Counter(r.timezone for r in restaurants) == {
        "Asia/Kolkata": 4, "Europe/London": 4, "America/New_York": 4
    }  # fmt: skip
    assert all(Decimal("0.12") <= r.commission_rate <= Decimal("0.25") for r in restaurants)
    assert all(r.onboarded_at == NOW_DT - timedelta(weeks=6) for r in restaurants)
    assert len(orders) > 10_000
    assert statuses[OrderStatus.DELIVERED] > 0.85 * len(orders)
    assert statuses[OrderStatus.REJECTED] and statuses[OrderStatus.CANCELLED]
    assert statuses[OrderStatus.PLACED] and statuses[OrderStatus.ACCEPTED]
    assert all(Decimal("8.50") <= o.total <= Decimal("85.00") for o in orders)
    assert_timestamps_consistent(orders)
    assert_lunch_and_dinner_peaks(orders)
    assert_carts_of_every_age()
    assert f"{len(orders)} orders" in output


def assert_timestamps_consistent(orders: list[Order]) -> None:
    last_hour = NOW_DT - timedelta(hours=1)
    for order in orders:
        assert order.restaurant.onboarded_at <= order.placed_at <= NOW_DT
        if order.status in (OrderStatus.PLACED, OrderStatus.ACCEPTED):
            assert order.placed_at >= last_hour, "only orders of the last hour are still in flight"
        if order.status == OrderStatus.DELIVERED:
            assert order.accepted_at is not None and order.delivered_at is not None
            assert order.placed_at < order.accepted_at < order.delivered_at <= NOW_DT
        stamps = {s: getattr(order, f"{s}_at") for s in ("accepted", "rejected", "delivered", "cancelled")}
        if order.status == OrderStatus.REJECTED:
            assert [s for s, at in stamps.items() if at] == ["rejected"]
        if order.status == OrderStatus.CANCELLED:
            assert [s for s, at in stamps.items() if at] == ["cancelled"] and order.cancel_reason


def assert_lunch_and_dinner_peaks(orders: list[Order]) -> None:
    hours = Counter(order.placed_at.astimezone(ZoneInfo(order.restaurant.timezone)).hour for order in orders)
    assert min(hours) >= 9, "no orders before opening"
    lunch, dinner, afternoon = hours[12] + hours[13], hours[19] + hours[20], hours[16] + hours[17]
    assert lunch > 3 * afternoon and dinner > 3 * afternoon


def assert_carts_of_every_age() -> None:
    ages = [NOW_DT - updated for updated in Cart.objects.values_list("updated_at", flat=True)]
    assert sum(age > timedelta(days=7) for age in ages) > 0.3 * len(ages)
    assert sum(age < timedelta(days=2) for age in ages) > 0.1 * len(ages)
    assert not Cart.objects.filter(items__isnull=True).exists()
    assert all(created <= updated for created, updated in Cart.objects.values_list("created_at", "updated_at"))


@pytest.mark.django_db
def test_demo_summary_reports_what_seed_demo_wrote():
    seed(*SMALL)
    out = StringIO()
    with time_machine.travel(NOW_DT, tick=False):
        call_command("demo_summary", "--json", stdout=out)
    summary: dict[str, Any] = json.loads(out.getvalue())
    delivered = Order.objects.filter(status=OrderStatus.DELIVERED)
    assert summary["restaurants"]["by_zone"] == {"America/New_York": 1, "Asia/Kolkata": 1, "Europe/London": 1}
    assert summary["orders"]["total"] == Order.objects.count()
    assert summary["orders"]["by_status"]["delivered"] == delivered.count()
    assert Decimal(summary["delivered_gross"]) == sum(o.total for o in delivered)
    assert summary["carts"]["stale"] == Cart.objects.filter(updated_at__lt=NOW_DT - timedelta(days=7)).count()
    assert summary["carts"]["fresh"] + summary["carts"]["stale"] == 120
    assert summary["payouts"] == {"count": 0, "gross": "0.00", "commission": "0.00", "net": "0.00"}
