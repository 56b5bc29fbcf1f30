"""One restaurant never stops everyone's payout (issue 30, hole 3).

101 delivered orders of 9,999,999,999.99 (each accepted by ``order_place`` then)
overflowed the payout's numeric(14, 2) gross, failed the batch's one INSERT, and left every
restaurant of the batch unpaid at every retry. Now an order is at most ORDER_TOTAL_MAX, the
payout's money columns hold any week of such orders, and a restaurant whose week the
database still refuses (orders from before the limit, enough of them to overflow even the
wider column) is isolated and alerted while the others are paid.

The orders from before the limit are written as that code could: straight into the table,
with the new check set aside for them as the migration leaves the rows it found
(``NOT VALID``). Each test then checks the ledger against the orders independently.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

from orders.models import Order, OrderStatus, Restaurant
from orders.services import order_accept, order_deliver, order_place, restaurant_create
from payouts.models import Payout
from scheduling.execution import runs_execute
from scheduling.models import JobRun, RunStatus
from scheduling.services import run_claim_manual

ONBOARDED = datetime(2027, 3, 1, tzinfo=UTC)  # a Monday
IN_THE_WEEK = datetime(2027, 3, 3, 12, tzinfo=UTC)
# The Sunday tick after that week has ended and settled.
AS_OF = datetime(2027, 3, 14, 20, 30, tzinfo=UTC)
HUGE = Decimal("9999999999.99")
ADMINS = [("Ops", "ops@example.com")]


def restaurant(name: str) -> Restaurant:
    return restaurant_create(name=name, timezone="UTC", commission_rate=Decimal("0.15"), onboarded_at=ONBOARDED)


def delivered(place: Restaurant, totals: list[str]) -> None:
    for minute, total in enumerate(totals):
        at = IN_THE_WEEK + timedelta(minutes=minute)
        order = order_place(restaurant=place, customer_ref="c", total=Decimal(total), now=at)
        order_accept(order_id=order.pk, now=at + timedelta(seconds=10))
        order_deliver(order_id=order.pk, now=at + timedelta(seconds=20))


def orders_from_before_the_limit(place: Restaurant, *, count: int, total: Decimal) -> None:
    """``count`` delivered orders of ``total`` written as the code before the limit let
    them be: the check on totals (if this schema has it) applies to new rows only, as the
    migration added it, so it is set aside for these and put back as it was."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # an ALTER waits for no deferred check
        cursor.execute("SELECT 1 FROM pg_constraint WHERE conname = 'order_total_at_most_max'")
        limited = cursor.fetchone() is not None
        cursor.execute("ALTER TABLE orders_order DROP CONSTRAINT IF EXISTS order_total_at_most_max")
        cursor.execute(
            "INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, accepted_at, "
            "delivered_at, cancel_reason) "
            "SELECT %s, 'old', 'delivered', %s, %s, %s, %s, '' FROM generate_series(1, %s)",
            [place.pk, total, IN_THE_WEEK, IN_THE_WEEK, IN_THE_WEEK + timedelta(minutes=30), count],
        )
        if limited:
            cursor.execute(
                "ALTER TABLE orders_order ADD CONSTRAINT order_total_at_most_max CHECK (total <= 100000.00) NOT VALID"
            )


def weekly_run(as_of: datetime = AS_OF) -> JobRun:
    """The weekly-payouts run as of ``as_of``, executed here as a worker would."""
    with time_machine.travel(as_of + timedelta(minutes=5), tick=False):
        run = run_claim_manual(job_name="weekly-payouts", scheduled_for=as_of, now=as_of, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    return run


def assert_paid_exactly_from_its_orders(place: Restaurant) -> None:
    """Independently of the payout SQL: every delivered order of ``place`` lies in exactly
    one of its payouts, and each payout's amounts are computed again from its orders."""
    payouts = list(Payout.objects.filter(restaurant=place).order_by("period_start"))
    assert payouts, f"{place.name} was not paid"
    orders = list(Order.objects.filter(restaurant=place, status=OrderStatus.DELIVERED))
    for order in orders:
        assert order.delivered_at is not None
        covering = [p for p in payouts if p.period_start <= order.delivered_at < p.period_end]
        assert len(covering) == 1, f"order {order.pk} is in {len(covering)} payouts"
    for payout in payouts:
        mine = [o.total for o in orders if payout.period_start <= o.delivered_at < payout.period_end]  # type: ignore[operator]
        gross = sum(mine, Decimal("0"))
        commission = (gross * payout.commission_rate).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        assert (payout.order_count, payout.gross, payout.commission, payout.net) == (
            len(mine),
            gross,
            commission,
            gross - commission,
        )


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_issues_week_of_101_orders_of_9_999_999_999_99_is_paid_and_stops_no_one():
    first, big, last = restaurant("Before"), restaurant("Huge week"), restaurant("After")
    delivered(first, ["18.05", "7.50"])
    orders_from_before_the_limit(big, count=101, total=HUGE)
    delivered(last, ["42.00"])

    run = weekly_run()

    assert run.status == RunStatus.SUCCEEDED, run.error
    for place in (first, big, last):
        assert_paid_exactly_from_its_orders(place)
    assert Payout.objects.get(restaurant=big).gross == 101 * HUGE  # 1,009,999,999,998.99


@pytest.mark.postgres
@pytest.mark.django_db
@override_settings(ADMINS=ADMINS)
def test_a_week_the_database_refuses_is_isolated_and_alerted_and_everyone_else_is_paid(mailoutbox):
    first, big, last = restaurant("Before"), restaurant("Too large"), restaurant("After")
    delivered(first, ["18.05", "7.50"])
    # 100,001 x 9,999,999,999.99 is past even numeric(17, 2): the database refuses the row.
    orders_from_before_the_limit(big, count=100_001, total=HUGE)
    delivered(last, ["42.00"])

    run = weekly_run()

    assert_paid_exactly_from_its_orders(first)
    assert_paid_exactly_from_its_orders(last)
    assert not Payout.objects.filter(restaurant=big).exists()
    # The run says it is not done, and why: it is retried and, if it stays so, dead.
    assert run.status == RunStatus.FAILED
    assert f"restaurant {big.pk}: DataError: numeric field overflow" in run.error
    assert "1 restaurant(s) not paid" in run.error
    # The people hear of it now, naming the restaurant and the reason.
    [mail] = mailoutbox
    assert f"restaurant {big.pk} could not be paid: DataError: numeric field overflow" in mail.body
    assert "weekly-payouts" in mail.subject


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_next_weeks_run_pays_the_others_again_and_still_isolates_the_refused_one():
    first, big = restaurant("Before"), restaurant("Too large")
    delivered(first, ["3.00"])
    orders_from_before_the_limit(big, count=100_001, total=HUGE)
    assert weekly_run().status == RunStatus.FAILED
    second = weekly_run(AS_OF + timedelta(weeks=1))
    assert second.status == RunStatus.FAILED
    assert f"restaurant {big.pk}: DataError" in second.error
    assert Payout.objects.filter(restaurant=first).count() == 2  # its first week once, then the next
    assert_paid_exactly_from_its_orders(first)
    assert not Payout.objects.filter(restaurant=big).exists()


@pytest.mark.django_db
def test_order_place_refuses_a_total_above_the_limit_and_takes_the_limit_itself():
    place = restaurant("Limits")
    with pytest.raises(ValidationError) as refused:
        order_place(restaurant=place, customer_ref="c", total=HUGE, now=IN_THE_WEEK)
    assert refused.value.message_dict["total"] == ["total 9999999999.99 is too large: an order is at most 100,000.00"]
    with pytest.raises(ValidationError):
        order_place(restaurant=place, customer_ref="c", total=Decimal("100000.01"), now=IN_THE_WEEK)
    assert not Order.objects.exists()
    order = order_place(restaurant=place, customer_ref="c", total=Decimal("100000.00"), now=IN_THE_WEEK)
    assert Order.objects.get(pk=order.pk).total == Decimal("100000.00")


@pytest.mark.django_db
def test_the_model_and_the_database_refuse_a_total_above_the_limit():
    place = restaurant("Limits")
    order = Order(restaurant=place, customer_ref="c", total=Decimal("100000.01"), placed_at=IN_THE_WEEK)
    with pytest.raises(ValidationError) as refused:
        order.full_clean()
    assert list(refused.value.message_dict) == ["total"]
    with pytest.raises(IntegrityError), transaction.atomic():
        Order.objects.create(restaurant=place, customer_ref="c", total=Decimal("100000.01"), placed_at=IN_THE_WEEK)
