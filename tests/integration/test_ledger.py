"""The ledger over months: ordinary changes (a zone, a rate, the tz database, a
deactivation, a late delivery, a deletion) never strand or misprice earned money.

Each test reproduces a finding of the ledger issue and checks the outcome and the ledger
invariant (``payouts.selectors.ledger_problems``) over the whole ledger. Portable unless
marked ``postgres`` (the database's own guards are PostgreSQL triggers).
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.contrib.admin.sites import site
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.test import RequestFactory
from django.urls import reverse

from orders.errors import LedgerError
from orders.models import CommissionRateChange, Order, OrderStatus, Restaurant
from orders.services import (
    order_accept,
    order_deliver,
    order_place,
    restaurant_deactivate,
    restaurant_rate_change,
)
from payouts.models import PAYOUT_JOB, Payout
from payouts.selectors import ledger_problems, payout_orders_waiting
from payouts.services import payouts_pay_due
from payouts.weeks import local_midnight
from tests.database_clock import database_clock_at
from tests.engine import pay
from tests.fences import TokenOnly
from tests.ledger_data import written_unguarded
from tests.locks import race_in_threads
from tiffin.tz import TZDATA_VERSION

# Sunday ticks of weekly-payouts (30 20 * * 0 UTC) in November 2026.
TICK = {day: datetime(2026, 11, day, 20, 30, tzinfo=UTC) for day in (8, 15, 22, 29)}
TICK_DEC_6 = datetime(2026, 12, 6, 20, 30, tzinfo=UTC)


def accept(*, order_id: int, now: datetime) -> Order:
    """``order_accept`` at ``now`` by every clock, the database's included (its deadline's)."""
    with database_clock_at(now):
        return order_accept(order_id=order_id, now=now)


def deliver(restaurant: Restaurant, at: datetime, total: str = "10.00") -> Order:
    """An order placed at ``at`` minus 2 minutes and delivered at exactly ``at``."""
    order = order_place(
        restaurant=restaurant, customer_ref="cust-1", total=Decimal(total), now=at - timedelta(minutes=2)
    )
    accept(order_id=order.pk, now=at - timedelta(minutes=1))
    return order_deliver(order_id=order.pk, now=at)


def hourly(restaurant: Restaurant, start: datetime, end: datetime) -> list[Order]:
    """One 10.00 order delivered at :15 of every hour in [start, end)."""
    orders, at = [], start + timedelta(minutes=15)
    while at < end:
        orders.append(deliver(restaurant, at))
        at += timedelta(hours=1)
    return orders


def ledger(restaurant: Restaurant) -> list[Payout]:
    return list(Payout.objects.filter(restaurant=restaurant).order_by("period_start"))


def assert_every_order_paid_once(restaurant: Restaurant) -> None:
    """Every order delivered before the last payout's end is in exactly one payout, the
    payouts' gross is those orders' total, and each payout starts where the last ended."""
    payouts = ledger(restaurant)
    delivered = Order.objects.filter(
        restaurant=restaurant, status=OrderStatus.DELIVERED, delivered_at__lt=payouts[-1].period_end
    )
    for order in delivered:
        covering = [p for p in payouts if p.period_start <= order.delivered_at < p.period_end]  # type: ignore[operator]
        assert len(covering) == 1, f"order {order.pk} at {order.delivered_at} is in {len(covering)} payouts"
    assert sum((p.gross for p in payouts), Decimal(0)) == sum((o.total for o in delivered), Decimal(0))
    assert [
        (a.period_end, b.period_start) for a, b in itertools.pairwise(payouts) if a.period_end != b.period_start
    ] == []


def restaurant_at(zone: str, onboarded_at: datetime, rate: str = "0.15") -> Restaurant:
    from orders.services import restaurant_create

    return restaurant_create(name=f"R {zone}", timezone=zone, commission_rate=Decimal(rate), onboarded_at=onboarded_at)


# --- 1. One time-zone database ------------------------------------------------------------


def test_zoneinfo_reads_only_the_pinned_tzdata_package():
    import zoneinfo

    assert zoneinfo.TZPATH == ()
    # 2026f: British Columbia keeps UTC-7 through the winter of 2026; older data says -8.
    assert ZoneInfo("America/Vancouver").utcoffset(datetime(2026, 11, 9, 12, tzinfo=UTC)) == timedelta(hours=-7)


OS_ZONEINFO = Path("/usr/share/zoneinfo/America/Vancouver")


@pytest.mark.django_db
@pytest.mark.skipif(not OS_ZONEINFO.exists(), reason="no OS zone files to compare with")
def test_a_payout_cut_with_other_zone_data_is_continued_without_a_gap():
    """A payout written by a server that read the OS's zone files (before the package was
    pinned) ends an hour later than the package's week; the next payout starts there."""
    with OS_ZONEINFO.open("rb") as file:
        os_zone = ZoneInfo.from_file(file, key="America/Vancouver")
    os_week_end = datetime(2026, 11, 2, tzinfo=os_zone).astimezone(UTC)
    package_week_end = local_midnight(date(2026, 11, 2), ZoneInfo("America/Vancouver"))
    if os_week_end == package_week_end:
        pytest.skip("the OS zone data agrees with the package for this week")
    vancouver = restaurant_at("America/Vancouver", datetime(2026, 10, 26, 7, tzinfo=UTC))
    hourly(vancouver, datetime(2026, 10, 26, 7, tzinfo=UTC), datetime(2026, 11, 9, 8, tzinfo=UTC))
    Payout.objects.create(  # what the other server paid: the week of 26 Oct by its data
        restaurant=vancouver,
        period_start=datetime(2026, 10, 26, 7, tzinfo=UTC),
        period_end=os_week_end,
        week_start_local=date(2026, 10, 26),
        gross=Decimal("1690.00"),
        commission=Decimal("253.50"),
        net=Decimal("1436.50"),
        order_count=169,
        commission_rate=Decimal("0.15"),
        tzdata_version="2025b",
        created_at=TICK[8],
    )
    pay(TICK[15])
    _, second = ledger(vancouver)
    assert (second.period_start, second.period_end) == (os_week_end, datetime(2026, 11, 9, 7, tzinfo=UTC))
    assert second.tzdata_version == TZDATA_VERSION
    assert_every_order_paid_once(vancouver)
    assert ledger_problems(paid_as_of=TICK[15]) == []


# --- 2. A zone change after payouts ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("before", "after"), [("America/New_York", "Asia/Kolkata"), ("Asia/Kolkata", "America/New_York")]
)
def test_a_zone_changed_after_payouts_leaves_no_order_unpaid(before, after):
    # Onboarded at the start of its week in New York (05:00 UTC), Monday 10:30 in Kolkata.
    restaurant = restaurant_at(before, datetime(2026, 11, 2, 5, tzinfo=UTC))
    hourly(restaurant, datetime(2026, 11, 2, 5, tzinfo=UTC), datetime(2026, 11, 16, 6, tzinfo=UTC))
    pay(TICK[8])  # nothing finished yet in New York; the week of 2 Nov in Kolkata is not either
    pay(TICK[15])  # the week of 2 Nov
    paid_before = len(ledger(restaurant))
    Restaurant.objects.filter(pk=restaurant.pk).update(timezone=after)  # through the ORM, as a shell would
    hourly(restaurant, datetime(2026, 11, 16, 6, tzinfo=UTC), datetime(2026, 11, 30, 6, tzinfo=UTC))
    pay(TICK[22])
    pay(TICK[29])
    payouts = ledger(restaurant)
    assert payouts[0].period_start <= restaurant.onboarded_at < payouts[0].period_end
    # After the change, each period ends at a local Monday 00:00 of the new zone.
    zone = ZoneInfo(after)
    ends = [p.period_end.astimezone(zone) for p in payouts[paid_before:]]
    assert len(ends) >= 2
    assert all((end.weekday(), end.hour, end.minute) == (0, 0, 0) for end in ends)
    assert_every_order_paid_once(restaurant)
    assert ledger_problems(paid_as_of=TICK[29]) == []


# --- 3. Rates as of the week ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_rate_change_before_a_late_catch_up_does_not_reach_into_the_finished_week():
    on_time, late = (restaurant_at("America/New_York", datetime(2026, 11, 9, 12, tzinfo=UTC)) for _ in range(2))
    week_of_16_nov = (datetime(2026, 11, 16, 5, tzinfo=UTC), datetime(2026, 11, 23, 5, tzinfo=UTC))
    for restaurant in (on_time, late):
        for n in range(7):  # 700.00 in the week of 16 Nov
            deliver(restaurant, week_of_16_nov[0] + timedelta(days=n, hours=12), "100.00")
    pay_only(TICK[29], on_time)  # on time, before the change
    changed_at = datetime(2026, 11, 30, 9, tzinfo=UTC)
    for restaurant in (on_time, late):
        restaurant_rate_change(
            restaurant_id=restaurant.pk, rate=Decimal("0.30"), effective_from=changed_at, now=changed_at
        )
    pay_only(TICK[29], late, clock_at=datetime(2026, 11, 30, 10, tzinfo=UTC))  # the tick was missed: late

    def week(restaurant: Restaurant) -> Payout:
        return Payout.objects.get(restaurant=restaurant, period_start=week_of_16_nov[0])

    assert (week(late).commission, week(late).net, week(late).commission_rate) == (
        Decimal("105.00"),
        Decimal("595.00"),
        Decimal("0.1500"),
    )
    assert (week(on_time).commission, week(on_time).net) == (Decimal("105.00"), Decimal("595.00"))
    # The week of 30 Nov began (05:00 UTC) before the change (09:00): it keeps 0.15. The
    # first period that begins after the change, the week of 7 Dec, pays 0.30.
    deliver(late, datetime(2026, 12, 1, 12, tzinfo=UTC), "100.00")
    deliver(late, datetime(2026, 12, 8, 12, tzinfo=UTC), "100.00")
    pay_only(datetime(2026, 12, 14, 20, 30, tzinfo=UTC), late)
    assert [(p.period_start, p.commission_rate, p.commission) for p in ledger(late)[-2:]] == [
        (datetime(2026, 11, 30, 5, tzinfo=UTC), Decimal("0.1500"), Decimal("15.00")),
        (datetime(2026, 12, 7, 5, tzinfo=UTC), Decimal("0.3000"), Decimal("30.00")),
    ]


def pay_only(as_of: datetime, restaurant: Restaurant, *, clock_at: datetime | None = None) -> None:
    with time_machine.travel(clock_at or as_of + timedelta(minutes=5), tick=False):
        call_command(
            "catch_up_payouts", "--as-of", as_of.isoformat(), "--restaurant", str(restaurant.pk), stdout=StringIO()
        )


@pytest.mark.django_db
def test_a_rate_change_in_the_past_is_refused_and_writes_nothing(restaurant):
    now = datetime(2026, 11, 30, 9, tzinfo=UTC)
    with pytest.raises(ValidationError) as refused:
        restaurant_rate_change(
            restaurant_id=restaurant.pk, rate=Decimal("0.2"), effective_from=now - timedelta(days=1), now=now
        )
    assert "takes effect now or later" in str(refused.value)
    with pytest.raises(ValidationError, match="0 <= rate < 1"):
        restaurant_rate_change(restaurant_id=restaurant.pk, rate=Decimal("1.5"), effective_from=now, now=now)
    assert not CommissionRateChange.objects.exists()


# --- 4. Deactivation stops orders, not payment ---------------------------------------------


@pytest.mark.django_db
def test_a_restaurant_deactivated_before_the_tick_is_paid_its_finished_weeks_and_then_closes():
    london = restaurant_at("Europe/London", datetime(2026, 11, 2, 12, tzinfo=UTC))
    for n in range(13):
        deliver(london, datetime(2026, 11, 9, 10, tzinfo=UTC) + timedelta(hours=11 * n))
    pay(TICK[15])  # the week of 2 Nov
    restaurant_deactivate(restaurant_id=london.pk, now=datetime(2026, 11, 16, 10, tzinfo=UTC))
    pay(TICK[22])
    pay(TICK[29])
    pay(TICK_DEC_6)
    weeks = [(p.period_start, p.order_count) for p in ledger(london)]
    assert weeks == [
        (datetime(2026, 11, 2, tzinfo=UTC), 0),
        (datetime(2026, 11, 9, tzinfo=UTC), 13),
        (datetime(2026, 11, 16, tzinfo=UTC), 0),  # the week it was deactivated in closes the ledger
    ]
    assert ledger_problems(paid_as_of=TICK_DEC_6) == []


@pytest.mark.django_db
def test_an_inactive_restaurant_cannot_deliver(restaurant):
    order = order_place(
        restaurant=restaurant, customer_ref="c", total=Decimal("5.00"), now=datetime(2026, 11, 9, tzinfo=UTC)
    )
    accept(order_id=order.pk, now=datetime(2026, 11, 9, 0, 1, tzinfo=UTC))
    restaurant_deactivate(restaurant_id=restaurant.pk, now=datetime(2026, 11, 9, 0, 2, tzinfo=UTC))
    with pytest.raises(LedgerError, match="deactivated"):
        order_deliver(order_id=order.pk, now=datetime(2026, 11, 9, 0, 3, tzinfo=UTC))
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED


# --- 5. Every delivered order paid exactly once --------------------------------------------


@pytest.fixture
def paid_london(db: None) -> tuple[Restaurant, Order]:
    london = restaurant_at("Europe/London", datetime(2026, 11, 2, 12, tzinfo=UTC))
    paid_order = deliver(london, datetime(2026, 11, 4, 12, tzinfo=UTC), "25.00")
    pay(TICK[15])
    return london, paid_order


def test_a_delivery_inside_a_paid_week_is_refused_and_a_later_one_waits_for_its_payout(paid_london):
    london, _ = paid_london
    order = order_place(
        restaurant=london, customer_ref="c", total=Decimal("7.00"), now=datetime(2026, 11, 5, tzinfo=UTC)
    )
    accept(order_id=order.pk, now=datetime(2026, 11, 5, 0, 1, tzinfo=UTC))
    with pytest.raises(LedgerError, match="already paid through 2026-11-09 00:00 UTC"):
        order_deliver(order_id=order.pk, now=datetime(2026, 11, 6, tzinfo=UTC))
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED
    order_deliver(order_id=order.pk, now=datetime(2026, 11, 9, 0, 30, tzinfo=UTC))
    [waiting] = payout_orders_waiting(restaurant_ids=[london.pk])
    assert (waiting.order_count, waiting.gross, waiting.paid_through) == (
        1,
        Decimal("7.00"),
        datetime(2026, 11, 9, tzinfo=UTC),
    )


def test_a_dry_run_shows_the_orders_waiting_for_their_payout(paid_london):
    london, _ = paid_london
    deliver(london, datetime(2026, 11, 10, 12, tzinfo=UTC), "7.00")
    out = StringIO()
    with time_machine.travel(datetime(2026, 11, 12, tzinfo=UTC), tick=False):
        call_command("catch_up_payouts", "--dry-run", "--json", stdout=out)
    waiting = json.loads(out.getvalue())["waiting"]
    assert waiting == [
        {
            "restaurant": london.pk,
            "restaurant_name": london.name,
            "paid_through": "2026-11-09T00:00:00+00:00",
            "orders": 1,
            "gross": "7.00",
        }
    ]


@pytest.mark.postgres
def test_a_raw_sql_delivery_inside_a_paid_week_is_refused_by_the_database(paid_london):
    london, _ = paid_london
    order = order_place(
        restaurant=london, customer_ref="c", total=Decimal("7.00"), now=datetime(2026, 11, 5, tzinfo=UTC)
    )
    accept(order_id=order.pk, now=datetime(2026, 11, 5, 0, 1, tzinfo=UTC))
    with pytest.raises(IntegrityError, match="is paid through"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE orders_order SET status = 'delivered', delivered_at = %s WHERE id = %s",
            [datetime(2026, 11, 6, tzinfo=UTC), order.pk],
        )
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED


# --- 6. Paid facts are immutable -----------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM orders_order WHERE id = %(order)s",
        "UPDATE orders_order SET total = total + 1 WHERE id = %(order)s",
        "UPDATE orders_order SET delivered_at = delivered_at + interval '1 week' WHERE id = %(order)s",
        "UPDATE orders_order SET restaurant_id = %(other)s WHERE id = %(order)s",
        "UPDATE orders_order SET status = 'cancelled', cancelled_at = delivered_at WHERE id = %(order)s",
    ],
)
def test_a_paid_order_cannot_be_deleted_or_changed_by_plain_sql(paid_london, statement):
    _, order = paid_london
    other = restaurant_at("Europe/Paris", datetime(2026, 11, 2, 12, tzinfo=UTC))  # never paid: the move is refused
    before = Order.objects.values().get(pk=order.pk)
    with (
        pytest.raises(IntegrityError, match="is covered by a payout"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement, {"order": order.pk, "other": other.pk})
    assert Order.objects.values().get(pk=order.pk) == before


@pytest.mark.postgres
def test_a_paid_order_keeps_its_guarded_columns_but_others_may_change(paid_london):
    _, order = paid_london
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders_order SET customer_ref = 'renamed' WHERE id = %s", [order.pk])
        assert cursor.rowcount == 1
    assert Order.objects.get(pk=order.pk).customer_ref == "renamed"


@pytest.mark.postgres
@pytest.mark.parametrize("statement", ["DELETE FROM payouts_payout", "UPDATE payouts_payout SET gross = gross"])
def test_payouts_are_append_only_in_the_database(paid_london, statement):
    count = Payout.objects.count()
    with pytest.raises(IntegrityError, match="part of the ledger"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    assert Payout.objects.count() == count


@pytest.mark.postgres
def test_the_onboarding_rate_never_changes_and_rate_history_cannot_reach_a_paid_week(paid_london):
    london, _ = paid_london
    with pytest.raises(IntegrityError, match="never changes"), transaction.atomic():
        Restaurant.objects.filter(pk=london.pk).update(commission_rate=Decimal("0.5"))
    with pytest.raises(IntegrityError, match="would reach into"), transaction.atomic():
        CommissionRateChange.objects.create(
            restaurant=london,
            rate=Decimal("0.5"),
            effective_from=datetime(2026, 11, 3, tzinfo=UTC),
            created_at=TICK[15],
        )
    assert not CommissionRateChange.objects.exists()


@pytest.mark.postgres
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE orders_commissionratechange SET effective_from = '2026-11-03 00:00+00' WHERE id = %s",
        "UPDATE orders_commissionratechange SET rate = 0.5 WHERE id = %s",
        "DELETE FROM orders_commissionratechange WHERE id = %s",
    ],
)
def test_a_recorded_rate_change_cannot_be_rewritten_or_deleted_by_plain_sql(paid_london, statement):
    london, _ = paid_london
    now = datetime(2026, 11, 20, tzinfo=UTC)
    change = restaurant_rate_change(
        restaurant_id=london.pk, rate=Decimal("0.2"), effective_from=datetime(2026, 12, 7, tzinfo=UTC), now=now
    )
    before = CommissionRateChange.objects.values().get(pk=change.pk)
    with pytest.raises(IntegrityError, match="is history"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, [change.pk])
    assert list(CommissionRateChange.objects.values()) == [before]


def test_no_admin_path_deletes_an_order(paid_london, admin_user, admin_client, admin_pages):
    london, paid_order = paid_london
    unpaid_order = deliver(london, datetime(2026, 11, 10, 12, tzinfo=UTC), "7.00")  # waiting: would lower a payout
    request = RequestFactory().get("/admin/orders/order/")
    request.user = admin_user
    order_admin = site._registry[Order]
    assert not order_admin.has_delete_permission(request)
    assert "delete_selected" not in order_admin.get_actions(request)
    # What a superuser's browser would post: the bulk delete's confirmation, and the delete page.
    ids = [str(paid_order.pk), str(unpaid_order.pk)]
    admin_client.post(
        reverse("admin:orders_order_changelist"), {"action": "delete_selected", "post": "yes", "_selected_action": ids}
    )
    for order in (paid_order, unpaid_order):
        delete = reverse("admin:orders_order_delete", args=[order.pk])
        assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert sorted(Order.objects.values_list("pk", flat=True)) == sorted([paid_order.pk, unpaid_order.pk])


# --- The invariant, checked by check_runs ----------------------------------------------------


@pytest.mark.django_db
def test_check_runs_reports_a_gap_and_a_payout_that_disagrees_with_its_orders_as_invariant_problems(paid_london):
    london, _ = paid_london
    week = Payout.objects.get(restaurant=london, period_start=datetime(2026, 11, 2, tzinfo=UTC))
    Payout.objects.create(  # a week later than it should be: 9 to 16 Nov is never paid
        restaurant=london,
        period_start=week.period_end + timedelta(weeks=1),
        period_end=week.period_end + timedelta(weeks=2),
        week_start_local=(week.period_end + timedelta(weeks=1)).date(),
        gross=Decimal("5.00"),
        commission=Decimal("0.75"),
        net=Decimal("4.25"),
        order_count=1,
        commission_rate=Decimal("0.15"),
        tzdata_version=TZDATA_VERSION,
        created_at=TICK[22],
    )
    out = StringIO()
    with time_machine.travel(TICK[22] + timedelta(hours=2), tick=False), pytest.raises(CommandError) as exited:
        call_command("check_runs", "--json", stdout=out)
    assert exited.value.returncode == 1
    # The ledger's own invariant (its transfers, unsent here with no provider, are another).
    problems = [p for p in json.loads(out.getvalue())["problems"] if (p["kind"], p["job"]) == ("invariant", PAYOUT_JOB)]
    details = sorted(p["detail"] for p in problems)
    assert [p["subject"] for p in problems] == [f"restaurant:{london.pk}"] * 2
    assert "2026-11-09 00:00 UTC to 2026-11-16 00:00 UTC is unpaid" in details[0]
    assert "has gross 5.00, its orders total 0.00" in details[1]  # the payout written in the window
    # The full check (simulate's report, the soak, the scenarios) sums the whole ledger.
    full = sorted(p.detail for p in ledger_problems(paid_as_of=None))
    assert "have gross 30.00, its orders delivered before then total 25.00" in full[1]


@pytest.mark.django_db
def test_a_ledger_paid_by_the_job_has_no_invariant_problem_and_a_missed_week_is_one(paid_london):
    london, _ = paid_london
    assert ledger_problems(paid_as_of=TICK[15]) == []
    [behind] = ledger_problems(paid_as_of=TICK[22])  # a run as of 22 Nov succeeded, yet 9 Nov is unpaid
    assert (behind.restaurant_id, behind.at) == (london.pk, datetime(2026, 11, 9, tzinfo=UTC))
    assert "was finished by the run as of 2026-11-22 20:30 UTC and is unpaid" in behind.detail


# --- The admin: rate history and deactivation ------------------------------------------------


def _rate_change_post(restaurant: Restaurant, day: str) -> dict[str, str]:
    return {
        "name": restaurant.name,
        "timezone": restaurant.timezone,
        "rate_changes-TOTAL_FORMS": "1",
        "rate_changes-INITIAL_FORMS": "0",
        "rate_changes-MIN_NUM_FORMS": "0",
        "rate_changes-MAX_NUM_FORMS": "1000",
        "rate_changes-0-rate": "0.2000",
        "rate_changes-0-effective_from_0": day,
        "rate_changes-0-effective_from_1": "00:00:00",
    }


def test_the_admin_adds_a_rate_change_for_the_future_and_refuses_one_in_the_past(
    paid_london, admin_client, admin_pages
):
    london, _ = paid_london
    url = reverse("admin:orders_restaurant_change", args=[london.pk])
    with time_machine.travel(datetime(2026, 11, 20, tzinfo=UTC), tick=False):
        refused = admin_client.post(url, _rate_change_post(london, "2026-11-03"))
        assert refused.status_code == 200  # the form again, with the error
        assert "takes effect now or later" in refused.content.decode()
        assert not CommissionRateChange.objects.exists()
        accepted = admin_client.post(url, _rate_change_post(london, "2026-12-07"))
    assert accepted.status_code == 302
    [change] = CommissionRateChange.objects.filter(restaurant=london)
    assert (change.rate, change.effective_from, change.created_at) == (
        Decimal("0.2000"),
        datetime(2026, 12, 7, tzinfo=UTC),
        datetime(2026, 11, 20, tzinfo=UTC),
    )
    page = admin_client.get(url).content.decode()
    assert "2026-11-09 00:00 UTC" in page  # paid through
    london.refresh_from_db()
    assert london.commission_rate == Decimal("0.1500")  # the onboarding rate is untouched


def test_the_admin_cannot_rewrite_a_rate_change_already_recorded(paid_london, admin_client, admin_pages):
    london, _ = paid_london
    url = reverse("admin:orders_restaurant_change", args=[london.pk])
    with time_machine.travel(datetime(2026, 11, 20, tzinfo=UTC), tick=False):
        assert admin_client.post(url, _rate_change_post(london, "2026-12-07")).status_code == 302
        [change] = CommissionRateChange.objects.filter(restaurant=london)
        rewrite = {  # the recorded row posted back with an earlier instant and another rate
            **_rate_change_post(london, "2026-11-03"),
            "rate_changes-INITIAL_FORMS": "1",
            "rate_changes-0-id": str(change.pk),
            "rate_changes-0-restaurant": str(london.pk),
            "rate_changes-0-rate": "0.9000",
        }
        admin_client.post(url, rewrite)
    assert list(CommissionRateChange.objects.values_list("pk", "rate", "effective_from")) == [
        (change.pk, Decimal("0.2000"), datetime(2026, 12, 7, tzinfo=UTC))
    ]


def test_the_restaurant_page_shows_the_orders_waiting_for_their_payout(paid_london, admin_client, admin_pages):
    london, _ = paid_london
    url = reverse("admin:orders_restaurant_change", args=[london.pk])
    assert "none" in _readonly(admin_client.get(url).content.decode(), "orders_waiting")
    deliver(london, datetime(2026, 11, 10, 12, tzinfo=UTC), "7.00")
    assert _readonly(admin_client.get(url).content.decode(), "orders_waiting") == "1 orders, gross 7.00"
    deliver(london, datetime(2026, 11, 10, 13, tzinfo=UTC), "12345.00")  # money as the commands print it
    assert _readonly(admin_client.get(url).content.decode(), "orders_waiting") == "2 orders, gross 12,352.00"


def test_a_payouts_admin_page_shows_its_rate_and_tz_database_release(paid_london, admin_client, admin_pages):
    london, _ = paid_london
    [payout] = ledger(london)
    page = admin_client.get(reverse("admin:payouts_payout_change", args=[payout.pk])).content.decode()
    assert _readonly(page, "tzdata_version") == TZDATA_VERSION
    assert _readonly(page, "commission_rate") == "0.1500"


@pytest.mark.parametrize("zone", ["localtime", "posixrules", "Factory", "EST", "EST5EDT", "Asia/Calcutta"])
def test_the_admin_refuses_a_zone_that_is_not_a_canonical_name(db, admin_client, admin_pages, zone):
    response = admin_client.post(
        reverse("admin:orders_restaurant_add"),
        {
            "name": "Anywhere",
            "timezone": zone,
            "commission_rate": "0.1500",
            "onboarded_at_0": "2026-11-02",
            "onboarded_at_1": "12:00:00",
            "is_active": "on",
            "rate_changes-TOTAL_FORMS": "0",
            "rate_changes-INITIAL_FORMS": "0",
            "rate_changes-MIN_NUM_FORMS": "0",
            "rate_changes-MAX_NUM_FORMS": "1000",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert "is not a canonical IANA time zone" in response.content.decode()
    assert not Restaurant.objects.exists()


def _readonly(page: str, field: str) -> str:
    """The text of a read-only field on an admin change page."""
    found = re.search(rf'field-{field}\b.*?<div class="readonly">(.*?)</div>', page, re.DOTALL)
    assert found, f"no read-only field {field} on the page"
    return found.group(1).strip()


def test_the_admin_deactivates_a_restaurant_through_the_service(paid_london, admin_client, admin_pages):
    london, _ = paid_london
    with time_machine.travel(datetime(2026, 11, 20, 9, tzinfo=UTC), tick=False):
        admin_client.post("/admin/orders/restaurant/", {"action": "deactivate", "_selected_action": [str(london.pk)]})
    london.refresh_from_db()
    assert (london.is_active, london.deactivated_at) == (False, datetime(2026, 11, 20, 9, tzinfo=UTC))


# --- A delivery racing a payout (PostgreSQL) ---------------------------------------------------


def _accepted_order(restaurant: Restaurant) -> Order:
    order = order_place(
        restaurant=restaurant, customer_ref="c", total=Decimal("9.00"), now=datetime(2026, 11, 3, tzinfo=UTC)
    )
    return accept(order_id=order.pk, now=datetime(2026, 11, 3, 0, 1, tzinfo=UTC))


_DELIVER_IN_WEEK = "UPDATE orders_order SET status = 'delivered', delivered_at = '2026-11-04 12:00+00' WHERE id = %s"


def _pay_week_of_2_nov() -> int:
    return payouts_pay_due(as_of=TICK[15], run=TokenOnly(fence=1, now=TICK[15]), now=TICK[15]).written


def _raw_deliver(order_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_DELIVER_IN_WEEK, [order_id])
        return cursor.rowcount


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_delivery_waiting_behind_a_payout_of_its_week_is_refused_once_the_payout_commits():
    london = restaurant_at("Europe/London", datetime(2026, 11, 2, 12, tzinfo=UTC))
    order = _accepted_order(london)
    # The delivery waits on the payout's lock of the restaurant row.
    _, delivered = race_in_threads(_pay_week_of_2_nov, lambda: _raw_deliver(order.pk))
    assert isinstance(delivered[0], IntegrityError) and "is paid through" in str(delivered[0])
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED
    assert ledger_problems(paid_as_of=TICK[15]) == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_payout_waiting_behind_a_delivery_into_its_week_pays_it_once_the_delivery_commits():
    london = restaurant_at("Europe/London", datetime(2026, 11, 2, 12, tzinfo=UTC))
    order = _accepted_order(london)
    # The payout's FOR NO KEY UPDATE waits behind the delivery's FOR SHARE.
    _, written = race_in_threads(lambda: _raw_deliver(order.pk), _pay_week_of_2_nov)
    assert written == [1]
    [payout] = ledger(london)
    assert (payout.order_count, payout.gross) == (1, Decimal("9.00"))
    assert ledger_problems(paid_as_of=TICK[15]) == []


@pytest.mark.django_db
def test_an_order_delivered_before_the_ledger_starts_is_reported_by_both_checks():
    """Such a delivery is refused now (tests/integration/test_ledger_start.py); one
    written before that refusal existed is reported."""
    london = restaurant_at("Europe/London", datetime(2026, 11, 2, 12, tzinfo=UTC))
    written_unguarded(london, delivered_at=datetime(2026, 10, 30, 12, tzinfo=UTC), total="4.00")
    pay(TICK[15])
    [hourly_check] = ledger_problems(paid_as_of=TICK[15], written_since=TICK[15])
    assert "1 delivered orders before the ledger's start at 2026-11-02 00:00 UTC are unpaid" in hourly_check.detail
    [full_check] = ledger_problems(paid_as_of=TICK[15])
    assert "have gross 0.00, its orders delivered before then total 4.00" in full_check.detail
