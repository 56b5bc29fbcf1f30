"""Order transitions: each legal one stamps its time, each illegal one is refused with a
clear message and writes nothing, and of racing callers exactly one wins."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from orders import services
from orders.errors import OrderNotFoundError, OrderTransitionError
from orders.models import Order, OrderStatus
from tests.database_clock import database_clock_at

PLACED_AT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LATER = PLACED_AT + timedelta(minutes=30)
# What the database's clock reads while an order placed at PLACED_AT may still be
# accepted (order_accept judges its deadline by that clock, not by ``now``).
IN_TIME = PLACED_AT + timedelta(minutes=1)


def cancel(**kwargs: Any) -> Order:
    return services.order_cancel(reason="kitchen closed early", **kwargs)


ACTIONS: dict[str, Callable[..., Order]] = {
    "accept": services.order_accept,
    "reject": services.order_reject,
    "deliver": services.order_deliver,
    "cancel": cancel,
}
PAST_TENSE = {"accept": "accepted", "reject": "rejected", "deliver": "delivered", "cancel": "cancelled"}
LEGAL = {("placed", "accept"), ("placed", "reject"), ("placed", "cancel"), ("accepted", "deliver")}
ILLEGAL = sorted(
    (status.value, action) for status in OrderStatus for action in ACTIONS if (status, action) not in LEGAL
)


def row(order_id: int) -> dict[str, Any]:
    return dict(Order.objects.filter(pk=order_id).values().get())


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "action"), ILLEGAL)
def test_an_illegal_transition_is_refused_and_changes_nothing(order_factory, status, action):
    order = order_factory(status)
    before = row(order.pk)
    with pytest.raises(OrderTransitionError) as refused:
        ACTIONS[action](order_id=order.pk, now=LATER)
    assert row(order.pk) == before
    allowed = "accepted" if action == "deliver" else "placed"
    assert str(refused.value) == f"order {order.pk} is {status}; only a {allowed} order can be {PAST_TENSE[action]}"
    assert (refused.value.current, refused.value.action) == (status, PAST_TENSE[action])


@pytest.mark.django_db
def test_illegal_transitions_cover_every_status_action_pair_but_the_four_legal_ones():
    assert len(ILLEGAL) == len(OrderStatus) * len(ACTIONS) - 4


@pytest.mark.django_db
def test_accept_sets_status_and_accepted_at_only(order_factory):
    placed = order_factory()
    with database_clock_at(IN_TIME):
        order = services.order_accept(order_id=placed.pk, now=LATER)
    stored = row(order.pk)
    assert (stored["status"], stored["accepted_at"]) == (OrderStatus.ACCEPTED, LATER)
    assert stored["rejected_at"] is stored["delivered_at"] is stored["cancelled_at"] is None
    assert order.status == OrderStatus.ACCEPTED  # the returned order is the stored one


@pytest.mark.django_db
def test_reject_sets_status_and_rejected_at(order_factory):
    order = services.order_reject(order_id=order_factory().pk, now=LATER)
    stored = row(order.pk)
    assert (stored["status"], stored["rejected_at"], stored["accepted_at"]) == (OrderStatus.REJECTED, LATER, None)


@pytest.mark.django_db
def test_deliver_sets_delivered_at_and_keeps_accepted_at(order_factory):
    accepted = order_factory(OrderStatus.ACCEPTED)
    services.order_deliver(order_id=accepted.pk, now=LATER)
    stored = row(accepted.pk)
    assert (stored["status"], stored["delivered_at"]) == (OrderStatus.DELIVERED, LATER)
    assert stored["accepted_at"] == accepted.accepted_at == PLACED_AT + timedelta(minutes=1)


@pytest.mark.django_db
def test_cancel_sets_cancelled_at_and_the_reason(order_factory):
    order = services.order_cancel(order_id=order_factory().pk, now=LATER, reason="  not accepted in time ")
    stored = row(order.pk)
    assert (stored["status"], stored["cancelled_at"]) == (OrderStatus.CANCELLED, LATER)
    assert stored["cancel_reason"] == "not accepted in time"


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["", "   ", "x" * 201])
def test_cancel_without_a_usable_reason_is_refused_and_changes_nothing(order_factory, reason):
    order = order_factory()
    before = row(order.pk)
    with pytest.raises(ValidationError, match="reason"):
        services.order_cancel(order_id=order.pk, now=LATER, reason=reason)
    assert row(order.pk) == before


@pytest.mark.django_db
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_a_transition_of_a_missing_order_says_so(action):
    with pytest.raises(OrderNotFoundError, match="order 999999 does not exist"):
        ACTIONS[action](order_id=999999, now=LATER)
    assert not Order.objects.exists()


@pytest.mark.django_db
def test_a_naive_now_is_refused_before_anything_is_written(order_factory):
    order = order_factory()
    with pytest.raises(ValueError, match="aware"):
        services.order_accept(order_id=order.pk, now=LATER.replace(tzinfo=None))
    assert row(order.pk)["status"] == OrderStatus.PLACED


# --- Races (PostgreSQL: real concurrent transactions) -----------------------------------


def _attempt(action: str, order_id: int, now: datetime, start: threading.Barrier, results: list[str | None]) -> None:
    try:
        start.wait(timeout=30)
        ACTIONS[action](order_id=order_id, now=now)
        results.append(action)
    except OrderTransitionError:
        results.append(None)
    finally:
        connection.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_accepts_and_a_reject_racing_have_exactly_one_winner(order_factory):
    restaurant = order_factory().restaurant
    for round_ in range(15):
        order = order_factory(restaurant=restaurant)
        start, results = threading.Barrier(3), list[str | None]()
        contenders = [("accept", 1), ("accept", 2), ("reject", 3)]
        threads = [
            threading.Thread(target=_attempt, args=(action, order.pk, LATER + timedelta(seconds=s), start, results))
            for action, s in contenders
        ]
        with database_clock_at(IN_TIME):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
        winners = [result for result in results if result is not None]
        assert len(results) == 3 and len(winners) == 1, f"round {round_}: {results}"
        stored = row(order.pk)
        assert stored["status"] == PAST_TENSE[winners[0]]
        # Only the winner's timestamp is set: no loser wrote anything.
        stamped = [field for field in ("accepted_at", "rejected_at") if stored[field] is not None]
        assert stamped == [f"{PAST_TENSE[winners[0]]}_at"]


def _wait_for_a_lock_waiter() -> None:
    # Poll (bounded) until another session is blocked on a row lock in this database.
    deadline = time.monotonic() + 10
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the second transition never waited for the first one's row lock")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_reject_blocked_behind_an_uncommitted_accept_is_refused_once_it_commits(order_factory):
    order = order_factory()
    accepted, release, refusals = threading.Event(), threading.Event(), []

    def accept_and_hold():
        try:
            with transaction.atomic():
                services.order_accept(order_id=order.pk, now=LATER)
                accepted.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    def reject():
        try:
            services.order_reject(order_id=order.pk, now=LATER)
        except OrderTransitionError as error:
            refusals.append(str(error))
        finally:
            connection.close()

    holder, rejecter = threading.Thread(target=accept_and_hold), threading.Thread(target=reject)
    with database_clock_at(IN_TIME):
        holder.start()
        assert accepted.wait(timeout=30)
        rejecter.start()
        _wait_for_a_lock_waiter()
        release.set()
        holder.join(timeout=30)
        rejecter.join(timeout=30)
    # The blocked UPDATE re-read the committed row, matched nothing, and names the winner.
    assert refusals == [f"order {order.pk} is accepted; only a placed order can be rejected"]
    assert (row(order.pk)["status"], row(order.pk)["rejected_at"]) == (OrderStatus.ACCEPTED, None)
