"""The smaller holes of issue 30 at the orders' edges, each reproduced as found:

1. a delivery racing a payout of its week was refused by the database's trigger as a bare
   IntegrityError (HTTP 500 in the admin's deliver action): now it is the LedgerError the
   service raises for the same refusal, and the admin shows it;
2. the admin's rate-change form accepted a change "from now" at clean time and the service
   refused it at save time, a moment later: now the page says so and nothing is saved;
3. a restaurant could accept an order past its deadline while the cancellation, judged by
   the database's clock, already counted it as overdue: now accepting is judged by that
   same clock.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.urls import reverse

from orders.admin import RateChangeForm
from orders.errors import LedgerError, OrderDeadlineError
from orders.models import CommissionRateChange, Order, OrderStatus, Restaurant
from orders.services import (
    order_accept,
    order_deliver,
    order_place,
    orders_cancel_unaccepted,
    restaurant_create,
)
from payouts.models import Payout
from payouts.selectors import ledger_problems
from payouts.services import payouts_pay_due
from tests.database_clock import database_clock_at
from tests.fences import TokenOnly
from tests.locks import in_thread, race_in_threads, wait_until_blocked

ONBOARDED = datetime(2027, 3, 1, tzinfo=UTC)  # a Monday
PLACED_AT = datetime(2027, 3, 3, 12, tzinfo=UTC)
DELIVERED_AT = PLACED_AT + timedelta(minutes=30)  # inside the week 1-8 March the payout covers
AS_OF = datetime(2027, 3, 14, 20, 30, tzinfo=UTC)


def restaurant(name: str = "Corner") -> Restaurant:
    return restaurant_create(name=name, timezone="UTC", commission_rate=Decimal("0.15"), onboarded_at=ONBOARDED)


def accepted_order(place: Restaurant) -> Order:
    order = order_place(restaurant=place, customer_ref="c", total=Decimal("12.00"), now=PLACED_AT)
    with database_clock_at(PLACED_AT + timedelta(minutes=1)):
        return order_accept(order_id=order.pk, now=PLACED_AT + timedelta(minutes=1))


def pay_the_week() -> int:
    return payouts_pay_due(as_of=AS_OF, run=TokenOnly(fence=1, now=AS_OF), now=AS_OF).written


# --- 1. A delivery racing a payout of its week ------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_delivery_that_lands_while_a_payout_holds_its_week_is_refused_with_a_ledger_error():
    order = accepted_order(restaurant())
    # The payout is written, not committed, so the service's check passes; the delivery's
    # trigger then waits on the payout's lock of the restaurant row.
    _, delivered = race_in_threads(pay_the_week, lambda: order_deliver(order_id=order.pk, now=DELIVERED_AT))

    [refusal] = delivered
    assert isinstance(refusal, LedgerError), repr(refusal)
    assert f"order {order.pk} cannot be delivered at 2027-03-03 12:30:00" in str(refusal)
    assert "is paid through 2027-03-08 00:00:00" in str(refusal)
    assert str(refusal).endswith("so it would never be paid")
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED
    assert ledger_problems(paid_as_of=AS_OF) == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_admins_deliver_action_racing_a_payout_shows_the_refusal(admin_client, admin_pages, clocks):
    order = accepted_order(restaurant())
    clocks(DELIVERED_AT)  # the admin reads this clock
    release = threading.Event()
    payer, paid, _ = in_thread(pay_the_week, hold=release)
    assert paid.wait(timeout=30)

    def release_once_the_delivery_waits() -> None:
        try:
            wait_until_blocked()
        finally:
            release.set()
            connection.close()

    releaser = threading.Thread(target=release_once_the_delivery_waits)
    releaser.start()
    response = admin_client.post(
        reverse("admin:orders_order_changelist"),
        {"action": "deliver_orders", "_selected_action": [order.pk]},
        follow=True,
    )
    releaser.join(timeout=30)
    payer.join(timeout=30)

    assert response.status_code == 200
    page = response.content.decode()
    assert f"Refused: order {order.pk} cannot be delivered at 2027-03-03 12:30:00" in page
    assert Order.objects.get(pk=order.pk).status == OrderStatus.ACCEPTED
    assert Payout.objects.get(restaurant=order.restaurant).order_count == 0


# --- 2. The rate-change form, with the clock moving between clean and save ---------------


def rate_change_post(place: Restaurant, *, name: str, effective_from: datetime) -> dict[str, str]:
    return {
        "name": name,
        "timezone": place.timezone,
        "onboarded_at_0": f"{place.onboarded_at:%Y-%m-%d}",
        "onboarded_at_1": f"{place.onboarded_at:%H:%M:%S}",
        "rate_changes-TOTAL_FORMS": "1",
        "rate_changes-INITIAL_FORMS": "0",
        "rate_changes-MIN_NUM_FORMS": "0",
        "rate_changes-MAX_NUM_FORMS": "1000",
        "rate_changes-0-rate": "0.2000",
        "rate_changes-0-effective_from_0": f"{effective_from:%Y-%m-%d}",
        "rate_changes-0-effective_from_1": f"{effective_from:%H:%M:%S}",
    }


@pytest.mark.django_db
def test_a_rate_change_that_became_past_between_clean_and_save_is_refused_on_the_page(
    admin_client, admin_user, admin_pages, monkeypatch
):
    place = restaurant()
    midnight = datetime(2027, 3, 8, tzinfo=UTC)
    url = reverse("admin:orders_restaurant_change", args=[place.pk])
    with time_machine.travel(midnight - timedelta(seconds=1), tick=False) as traveller:
        admin_client.force_login(admin_user)  # a session of this (future) day
        checked = RateChangeForm.clean

        def clean_then_the_clock_moves(form: RateChangeForm) -> dict[str, Any]:
            data = checked(form)
            traveller.move_to(midnight + timedelta(seconds=1))
            return data

        monkeypatch.setattr(RateChangeForm, "clean", clean_then_the_clock_moves)
        response = admin_client.post(url, rate_change_post(place, name="Renamed", effective_from=midnight), follow=True)

    assert response.status_code == 200
    page = response.content.decode()
    assert "Nothing was saved: a rate change takes effect now or later, not at 2027-03-08 00:00 UTC" in page
    assert not CommissionRateChange.objects.exists()
    assert Restaurant.objects.get(pk=place.pk).name == "Corner"  # the whole save was undone


@pytest.mark.django_db
def test_a_rate_change_still_in_the_future_at_save_is_recorded(admin_client, admin_user, admin_pages):
    place = restaurant()
    url = reverse("admin:orders_restaurant_change", args=[place.pk])
    with time_machine.travel(datetime(2027, 3, 7, tzinfo=UTC), tick=False):
        admin_client.force_login(admin_user)
        response = admin_client.post(url, rate_change_post(place, name="Renamed", effective_from=AS_OF))
    assert response.status_code == 302
    [change] = CommissionRateChange.objects.all()
    assert (change.rate, change.effective_from) == (Decimal("0.2000"), AS_OF)


# --- 3. Accepting past the deadline, by the database's clock -----------------------------


@pytest.mark.postgres
@pytest.mark.django_db
def test_an_order_past_its_deadline_by_the_database_clock_cannot_be_accepted_by_a_slow_worker(clocks):
    from tiffin import clock

    order = order_place(restaurant=restaurant(), customer_ref="c", total=Decimal("9.00"), now=PLACED_AT)
    deadline = PLACED_AT + timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)
    # The database is a second past the deadline; this worker's clock is 90 s behind it.
    clocks(deadline + timedelta(seconds=1), skew=-90)
    assert clock.now() < deadline

    with pytest.raises(OrderDeadlineError) as refused:
        order_accept(order_id=order.pk, now=clock.now())
    assert str(refused.value) == (
        f"order {order.pk} is past its acceptance deadline and can no longer be accepted; "
        "it is cancelled as not accepted in time"
    )
    stored = Order.objects.get(pk=order.pk)
    assert (stored.status, stored.accepted_at) == (OrderStatus.PLACED, None)
    # The cancellation, by the same clock, takes it: the two never both apply.
    assert orders_cancel_unaccepted(order_ids=[order.pk]) == 1


@pytest.mark.postgres
@pytest.mark.django_db
def test_an_order_before_its_deadline_by_the_database_clock_is_accepted_by_a_fast_worker(clocks):
    from tiffin import clock

    order = order_place(restaurant=restaurant(), customer_ref="c", total=Decimal("9.00"), now=PLACED_AT)
    deadline = PLACED_AT + timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)
    # The database is five seconds before the deadline; this worker's clock is 90 s ahead.
    clocks(deadline - timedelta(seconds=5), skew=90)
    assert clock.now() > deadline

    accepted = order_accept(order_id=order.pk, now=clock.now())

    assert accepted.status == OrderStatus.ACCEPTED
    assert orders_cancel_unaccepted(order_ids=[order.pk]) == 0
