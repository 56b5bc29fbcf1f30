"""Stale-order cancellation: each order's delayed run, created with the order, cancels it
at its deadline only if the restaurant has not answered; the safety net covers orders
whose run is missing or dead. "Past its deadline" is the database's clock's call, so
these tests set it (``clocks``) as well as the scheduler's ``now``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

from orders.models import STALE_CANCEL_REASON, Order, OrderStatus, Restaurant
from orders.services import (
    order_accept,
    order_place,
    order_reject,
    orders_cancel_overdue,
)
from scheduling.dispatch import tick_pass
from scheduling.execution import runs_execute
from scheduling.models import JobRun, RunStatus
from scheduling.registry import registry
from scheduling.services import run_schedule_delayed
from tests.engine import drain_queue, queued_tasks
from tests.locks import held_in_thread, race_behind_lock
from tiffin import clock

PLACED_AT = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
DEADLINE = PLACED_AT + timedelta(minutes=10)


def place(restaurant: Restaurant, at: datetime = PLACED_AT) -> Order:
    return order_place(restaurant=restaurant, customer_ref="cust-00001", total=Decimal("24.50"), now=at)


def run_due(now: datetime) -> int:
    """One scheduler pass at ``now`` with only the delayed job declared, then a worker
    (whose handlers read the clock ``clocks`` set)."""
    with registry.replaced(registry.get("cancel-stale-order")):
        tick_pass(now=now)
        return drain_queue()


def assert_cancelled_just_after(order: Order, deadline: datetime) -> None:
    order.refresh_from_db()
    assert order.cancelled_at is not None
    assert deadline <= order.cancelled_at < deadline + timedelta(seconds=10)


def cancellation_of(order: Order) -> JobRun:
    return JobRun.objects.get(job_name="cancel-stale-order", subject=f"order:{order.pk}")


def one_order(*, cancelled: int, left_alone: int) -> dict[str, object]:
    """The result of a cancellation run about one order, its subject recognised."""
    return {"orders": 1, "cancelled": cancelled, "left_alone": left_alone, "unrecognised_subjects": []}


def status(order: Order) -> str:
    order.refresh_from_db()
    return order.status


@pytest.mark.django_db
def test_placing_an_order_creates_its_delayed_cancellation_due_at_the_deadline(restaurant):
    order = place(restaurant)
    run = cancellation_of(order)
    assert (run.status, run.scheduled_for, run.due_at, run.trigger) == (
        RunStatus.SCHEDULED,
        DEADLINE,
        DEADLINE,
        "delayed",
    )


@pytest.mark.django_db
def test_the_timeout_is_a_setting(restaurant, settings):
    settings.ORDER_ACCEPT_TIMEOUT_SECONDS = 90
    assert cancellation_of(place(restaurant)).scheduled_for == PLACED_AT + timedelta(seconds=90)


@pytest.mark.django_db
def test_a_rolled_back_order_leaves_no_delayed_run(restaurant):
    with pytest.raises(RuntimeError), transaction.atomic():
        place(restaurant)
        raise RuntimeError("the payment failed")
    assert not Order.objects.exists()
    assert not JobRun.objects.exists()


# A trigger that refuses every new run: the cancellation of an order cannot be written.
_REFUSE_RUNS = {
    "postgresql": [
        "CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'no runs today'; END $$",
        "CREATE TRIGGER test_refuse_run BEFORE INSERT ON job_runs FOR EACH ROW EXECUTE FUNCTION test_refuse_run()",
    ],
    "sqlite": [
        "CREATE TRIGGER test_refuse_run BEFORE INSERT ON job_runs BEGIN SELECT RAISE(ABORT, 'no runs today'); END"
    ],
}
_ALLOW_RUNS = {
    "postgresql": ["DROP TRIGGER test_refuse_run ON job_runs", "DROP FUNCTION test_refuse_run()"],
    "sqlite": ["DROP TRIGGER test_refuse_run"],
}


@pytest.mark.django_db(transaction=True)
def test_an_order_whose_cancellation_cannot_be_written_is_not_placed(restaurant):
    # Outside any transaction of the caller's, as a web request places it.
    with connection.cursor() as cursor:
        for statement in _REFUSE_RUNS[connection.vendor]:
            cursor.execute(statement)
    try:
        with pytest.raises(DatabaseError, match="no runs today"):
            place(restaurant)
    finally:
        with connection.cursor() as cursor:
            for statement in _ALLOW_RUNS[connection.vendor]:
                cursor.execute(statement)
    assert not Order.objects.exists()
    assert not JobRun.objects.exists()
    assert cancellation_of(place(restaurant)).status == RunStatus.SCHEDULED


@pytest.mark.django_db
def test_an_order_refused_inside_a_callers_transaction_leaves_that_transaction_usable(restaurant):
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        for statement in _REFUSE_RUNS[connection.vendor]:
            cursor.execute(statement)
    with transaction.atomic():
        with pytest.raises(DatabaseError, match="no runs today"):
            place(restaurant)
        assert not Order.objects.exists()  # the caller's transaction still answers


@pytest.mark.django_db(transaction=True)
def test_the_placed_order_returned_is_the_order_stored_with_its_claimed_run(restaurant):
    order = place(restaurant)
    stored = Order.objects.get(pk=order.pk)
    columns = [field.attname for field in Order._meta.concrete_fields]
    assert [getattr(order, name) for name in columns] == [getattr(stored, name) for name in columns]
    assert (order.status, order.total, order.placed_at, order.cancel_reason) == (
        OrderStatus.PLACED,
        Decimal("24.50"),
        PLACED_AT,
        "",
    )
    assert order.restaurant is restaurant
    run = cancellation_of(order)
    assert list(run.events.values_list("kind", "at")) == [("claimed", PLACED_AT)]


@pytest.mark.django_db(transaction=True)
def test_an_order_whose_cancellation_key_is_taken_is_placed_and_says_so(restaurant, caplog):
    # A run left behind for the id the next order gets (orders wiped, ids reused).
    first = place(restaurant)
    taken = run_schedule_delayed(
        job_name="cancel-stale-order", subject=f"order:{first.pk + 1}", scheduled_for=DEADLINE, now=PLACED_AT
    )
    assert taken is not None
    with caplog.at_level("WARNING", logger="orders"):
        order = place(restaurant)
    assert order.pk == first.pk + 1
    assert Order.objects.filter(pk=order.pk, status=OrderStatus.PLACED).exists()
    assert cancellation_of(order).pk == taken.pk  # the run that was there, and no second one
    warnings = [record.getMessage() for record in caplog.records if record.name == "orders"]
    assert len(warnings) == 1 and f"order {order.pk} is placed" in warnings[0], warnings


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_an_order_and_its_cancellation_are_one_statement(restaurant):
    with CaptureQueriesContext(connection) as queries:
        order = place(restaurant)
    assert len(queries) == 1, [query["sql"][:80] for query in queries]
    assert cancellation_of(order).scheduled_for == DEADLINE


@pytest.mark.django_db
def test_an_order_nobody_answered_is_cancelled_at_its_deadline(restaurant, clocks):
    order = place(restaurant)
    clocks(DEADLINE - timedelta(seconds=1))
    assert run_due(DEADLINE - timedelta(seconds=1)) == 0
    assert status(order) == OrderStatus.PLACED
    clocks(DEADLINE)
    run_due(DEADLINE)
    assert status(order) == OrderStatus.CANCELLED
    assert order.cancel_reason == STALE_CANCEL_REASON
    assert_cancelled_just_after(order, DEADLINE)
    run = cancellation_of(order)
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, one_order(cancelled=1, left_alone=0))


@pytest.mark.django_db
def test_an_order_accepted_a_moment_before_its_deadline_is_not_cancelled(restaurant, clocks):
    order = place(restaurant)
    clocks(DEADLINE - timedelta(seconds=1))  # accepted before its deadline by the database's clock
    order_accept(order_id=order.pk, now=DEADLINE - timedelta(milliseconds=1))
    run_due(DEADLINE)
    assert status(order) == OrderStatus.ACCEPTED
    assert cancellation_of(order).result == one_order(cancelled=0, left_alone=1)


@pytest.mark.django_db
def test_a_run_dispatched_early_by_a_fast_clock_does_not_cancel_before_the_deadline(restaurant, clocks):
    order = place(restaurant)
    # A scheduler whose clock runs 90 s ahead hands the run to a worker whose clock is right.
    clocks(DEADLINE - timedelta(seconds=89))
    run_due(DEADLINE + timedelta(seconds=1))
    assert status(order) == OrderStatus.PLACED
    result = cancellation_of(order).result
    assert result is not None
    assert result["left_alone"] == 1


@pytest.mark.django_db
def test_a_run_whose_subject_names_no_order_does_not_fail_its_batch(restaurant, clocks):
    order = place(restaurant)
    clocks(DEADLINE)
    with registry.replaced(registry.get("cancel-stale-order")):
        run_schedule_delayed(job_name="cancel-stale-order", subject="order:oops", scheduled_for=DEADLINE, now=PLACED_AT)
    run_due(DEADLINE)
    assert status(order) == OrderStatus.CANCELLED
    runs = list(JobRun.objects.filter(job_name="cancel-stale-order"))
    assert {run.status for run in runs} == {RunStatus.SUCCEEDED}
    assert runs[0].result is not None
    assert runs[0].result["unrecognised_subjects"] == ["order:oops"]


@pytest.mark.django_db
def test_a_rejected_order_is_left_rejected(restaurant, clocks):
    order = place(restaurant)
    clocks(DEADLINE)
    order_reject(order_id=order.pk, now=PLACED_AT + timedelta(minutes=3))
    run_due(DEADLINE)
    assert status(order) == OrderStatus.REJECTED
    assert order.cancel_reason == ""


@pytest.mark.django_db
def test_many_due_runs_are_executed_in_batches(restaurant, clocks):
    orders = [place(restaurant, PLACED_AT + timedelta(seconds=n)) for n in range(250)]
    for order in orders[::5]:
        order_accept(order_id=order.pk, now=PLACED_AT + timedelta(minutes=5))
    later = DEADLINE + timedelta(minutes=5)  # every deadline has passed
    clocks(later)
    with registry.replaced(registry.get("cancel-stale-order")):
        tick_pass(now=later)
        assert sorted(len(task["args"][0]) for task in queued_tasks()) == [50, 200]  # two tasks, not 250
        drain_queue()
    counts = dict(Order.objects.order_by().values_list("status").annotate(n=Count("id")))
    assert counts == {OrderStatus.CANCELLED: 200, OrderStatus.ACCEPTED: 50}
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


# --- The safety net ---------------------------------------------------------------------


def imported(restaurant: Restaurant, placed_at: datetime) -> Order:
    """An order written without order_place (a bulk import, the demo seed): no delayed run."""
    return Order.objects.create(restaurant=restaurant, customer_ref="c", total=Decimal("9.00"), placed_at=placed_at)


@pytest.mark.django_db
def test_the_safety_net_cancels_overdue_orders_whose_run_is_missing_or_dead(restaurant, clocks):
    missing = imported(restaurant, PLACED_AT)
    dead = place(restaurant)
    JobRun.objects.filter(subject=f"order:{dead.pk}").update(status=RunStatus.DEAD)
    alive = place(restaurant)  # its run is still scheduled: left to it
    not_yet = imported(restaurant, PLACED_AT + timedelta(minutes=6))
    answered = imported(restaurant, PLACED_AT)
    order_accept(order_id=answered.pk, now=PLACED_AT + timedelta(minutes=1))

    as_of = PLACED_AT + timedelta(minutes=15)  # a */5 tick
    clocks(as_of + timedelta(seconds=3))
    run = safety_net_run(as_of)
    runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    assert run.result == {"as_of": as_of.isoformat(), "cancelled": 2}
    assert [status(o) for o in (missing, dead, alive, not_yet, answered)] == [
        OrderStatus.CANCELLED,
        OrderStatus.CANCELLED,
        OrderStatus.PLACED,
        OrderStatus.PLACED,
        OrderStatus.ACCEPTED,
    ]


@pytest.mark.django_db
def test_the_safety_net_works_through_every_batch(restaurant, clocks):
    for n in range(7):
        imported(restaurant, PLACED_AT - timedelta(minutes=n))
    clocks(DEADLINE)
    assert orders_cancel_overdue(batch_size=3) == 7
    assert Order.objects.filter(status=OrderStatus.CANCELLED).count() == 7


# --- Concurrency (PostgreSQL) -------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_accept_still_committing_at_the_deadline_wins_over_the_cancellation(restaurant, clocks):
    order = place(restaurant)
    clocks(DEADLINE - timedelta(seconds=1))
    accepting, commit = threading.Event(), threading.Event()

    def restaurant_accepts() -> None:
        with transaction.atomic():
            order_accept(order_id=order.pk, now=DEADLINE - timedelta(milliseconds=1))
            clocks(DEADLINE)  # the deadline passes while the accept is still committing
            accepting.set()
            commit.wait(10)

    # The cancellation's UPDATE waits for the accept's row lock.
    race_behind_lock(holder=restaurant_accepts, holding=accepting, waiter=lambda: run_due(DEADLINE), release=commit)
    assert status(order) == OrderStatus.ACCEPTED
    assert cancellation_of(order).result == one_order(cancelled=0, left_alone=1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_safety_net_skips_an_order_someone_holds_and_does_not_wait_for_it(restaurant, clocks):
    held, free = imported(restaurant, PLACED_AT), imported(restaurant, PLACED_AT)
    clocks(DEADLINE)
    with held_in_thread(lambda: list(Order.objects.select_for_update().filter(pk=held.pk))):
        cancelled = orders_cancel_overdue()
    assert cancelled == 1
    assert (status(held), status(free)) == (OrderStatus.PLACED, OrderStatus.CANCELLED)
    assert orders_cancel_overdue() == 1  # the next pass takes it


def safety_net_run(tick: datetime) -> JobRun:
    """The safety net's run of ``tick``, claimed (by whichever scheduler) and enqueued."""
    return JobRun.objects.create(
        job_name="cancel-stale-orders",
        scheduled_for=tick,
        due_at=tick,
        status=RunStatus.ENQUEUED,
        trigger="cron",
        created_at=tick,
        enqueued_at=tick,
    )


# --- Skewed clocks: the database's clock decides ------------------------------------------


@pytest.mark.django_db
def test_the_safety_net_cancels_an_order_an_early_run_left_alone_even_if_its_worker_clock_lags(restaurant, clocks):
    order = place(restaurant)
    clocks(DEADLINE - timedelta(seconds=60))
    run_due(DEADLINE + timedelta(seconds=1))  # handed out early: left alone
    assert status(order) == OrderStatus.PLACED
    # The net runs 30 s after the deadline, on a worker whose clock lags 90 s behind.
    clocks(DEADLINE + timedelta(seconds=30), skew=-90)
    assert orders_cancel_overdue() == 1
    assert status(order) == OrderStatus.CANCELLED
    assert_cancelled_just_after(order, DEADLINE + timedelta(seconds=30))


@pytest.mark.django_db
def test_a_worker_whose_clock_runs_90_seconds_fast_does_not_cancel_early(restaurant, clocks):
    order = place(restaurant)
    # 80 s before the deadline; the worker (and its scheduler) read 10 s after it.
    clocks(DEADLINE - timedelta(seconds=80), skew=90)
    assert run_due(clock.now()) == 1
    assert status(order) == OrderStatus.PLACED
    result = cancellation_of(order).result
    assert result is not None and (result["cancelled"], result["left_alone"]) == (0, 1)


@pytest.mark.django_db
def test_a_safety_net_tick_claimed_90_seconds_early_does_not_cancel_early(restaurant, clocks):
    order = imported(restaurant, PLACED_AT)  # no run of its own; its deadline is the 12:10 tick
    # A scheduler 90 s fast claimed the 12:10 tick at 12:08:30; a worker as fast runs it.
    clocks(DEADLINE - timedelta(seconds=90), skew=90)
    run = safety_net_run(DEADLINE)
    runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"as_of": DEADLINE.isoformat(), "cancelled": 0})
    assert status(order) == OrderStatus.PLACED


@pytest.mark.django_db
def test_a_worker_whose_clock_runs_90_seconds_slow_does_not_cancel_late(restaurant, clocks):
    order = place(restaurant)
    # 5 s after the deadline; the scheduler is right, the worker reads 85 s before it.
    clocks(DEADLINE + timedelta(seconds=5), skew=-90)
    run_due(DEADLINE + timedelta(seconds=5))
    assert status(order) == OrderStatus.CANCELLED
    assert_cancelled_just_after(order, DEADLINE + timedelta(seconds=5))
