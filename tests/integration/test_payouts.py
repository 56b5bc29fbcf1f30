"""Weekly payouts: every finished, unpaid business week of every active restaurant, in
the restaurant's own zone, exactly once, as of the run's logical time.

Portable: these run on PostgreSQL and on SQLite (the payout SQL differs only in its
money arithmetic). The orders are placed, accepted and delivered through the services.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.management import call_command
from django.db import transaction
from django.db.models import Sum

from orders.models import Order, OrderStatus, Restaurant
from orders.services import restaurant_deactivate
from payouts import sql
from payouts.jobs import weekly_payouts
from payouts.models import Payout
from payouts.selectors import payout_batches, payout_weeks_due
from payouts.services import (
    PAYOUT_FENCE_RESOURCE,
    BatchProgress,
    payout_catch_up_execute,
    payouts_pay_due,
)
from scheduling.context import RunContext
from scheduling.dispatch import runs_abandon_silent, tick_pass
from scheduling.execution import runs_start
from scheduling.fencing import StaleFenceError, fence_check
from scheduling.models import JobRun, RunStatus, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from scheduling.services import run_claim_manual
from tests.engine import drain_queue, pay
from tests.fences import TokenOnly
from tiffin.money import CENT


@pytest.fixture
def deliver(order_factory: Any) -> Any:
    """Deliver an order of ``total`` at exactly ``at`` (placed two minutes before)."""

    def make(restaurant: Restaurant, at: datetime, total: str = "20.00") -> Order:
        return order_factory(
            OrderStatus.DELIVERED, restaurant=restaurant, total=Decimal(total), placed_at=at - timedelta(minutes=2)
        )

    return make


def result(run: JobRun) -> dict[str, Any]:
    assert isinstance(run.result, dict)
    return run.result


def weeks_of(restaurant: Restaurant) -> list[Payout]:
    return list(Payout.objects.filter(restaurant=restaurant).order_by("period_start"))


# --- Daylight saving: a London restaurant across both 2027 changes ----------------------


@pytest.mark.django_db
def test_a_london_restaurant_is_paid_over_the_167_hour_spring_week(restaurant_factory, deliver):
    london = restaurant_factory(timezone="Europe/London", onboarded_at=datetime(2027, 3, 15, 9, tzinfo=UTC))
    # Clocks go from 01:00 GMT to 02:00 BST on Sunday 2027-03-28.
    deliver(london, datetime(2027, 3, 21, 23, 30, tzinfo=UTC), "11.00")  # Sun 23:30 GMT: week of 15 March
    deliver(london, datetime(2027, 3, 22, 0, 30, tzinfo=UTC), "12.00")  # Mon 00:30 GMT: week of 22 March
    deliver(london, datetime(2027, 3, 28, 1, 30, tzinfo=UTC), "13.00")  # 02:30 BST, just after the jump
    deliver(london, datetime(2027, 3, 28, 22, 30, tzinfo=UTC), "14.00")  # Sun 23:30 BST: still 22 March
    deliver(london, datetime(2027, 3, 28, 23, 30, tzinfo=UTC), "15.00")  # Mon 00:30 BST: week of 29 March
    pay(datetime(2027, 4, 11, 20, 30, tzinfo=UTC))

    paid = weeks_of(london)
    assert [(p.week_start_local, p.period_end - p.period_start) for p in paid] == [
        (date(2027, 3, 15), timedelta(hours=168)),
        (date(2027, 3, 22), timedelta(hours=167)),
        (date(2027, 3, 29), timedelta(hours=168)),
    ]
    assert paid[1].period_end == datetime(2027, 3, 28, 23, 0, tzinfo=UTC)
    assert [(p.order_count, p.gross) for p in paid] == [
        (1, Decimal("11.00")),
        (3, Decimal("39.00")),
        (1, Decimal("15.00")),
    ]


@pytest.mark.django_db
def test_a_london_restaurant_is_paid_over_the_169_hour_autumn_week(restaurant_factory, deliver):
    london = restaurant_factory(timezone="Europe/London", onboarded_at=datetime(2027, 10, 18, 9, tzinfo=UTC))
    # Clocks go from 02:00 BST back to 01:00 GMT on Sunday 2027-10-31: 01:00-02:00 happens twice.
    deliver(london, datetime(2027, 10, 24, 22, 30, tzinfo=UTC), "11.00")  # Sun 23:30 BST: week of 18 Oct
    deliver(london, datetime(2027, 10, 24, 23, 30, tzinfo=UTC), "12.00")  # Mon 00:30 BST: week of 25 Oct
    deliver(london, datetime(2027, 10, 31, 0, 30, tzinfo=UTC), "13.00")  # 01:30 BST, the first 01:30
    deliver(london, datetime(2027, 10, 31, 1, 30, tzinfo=UTC), "14.00")  # 01:30 GMT, the second 01:30
    deliver(london, datetime(2027, 10, 31, 23, 30, tzinfo=UTC), "15.00")  # Sun 23:30 GMT: still 25 Oct
    deliver(london, datetime(2027, 11, 1, 0, 30, tzinfo=UTC), "16.00")  # Mon 00:30 GMT: week of 1 Nov
    pay(datetime(2027, 11, 14, 20, 30, tzinfo=UTC))

    paid = weeks_of(london)
    assert [(p.week_start_local, p.period_end - p.period_start) for p in paid] == [
        (date(2027, 10, 18), timedelta(hours=168)),
        (date(2027, 10, 25), timedelta(hours=169)),
        (date(2027, 11, 1), timedelta(hours=168)),
    ]
    assert paid[1].period_start == datetime(2027, 10, 24, 23, 0, tzinfo=UTC)
    assert [(p.order_count, p.gross) for p in paid] == [
        (1, Decimal("11.00")),
        (4, Decimal("54.00")),  # both 01:30s, each once
        (1, Decimal("16.00")),
    ]
    assert sum(p.order_count for p in paid) == Order.objects.filter(status=OrderStatus.DELIVERED).count()


# --- Catching up ------------------------------------------------------------------------

# Kolkata weeks end on Sunday at 18:30 UTC, so each Sunday 20:30 UTC tick pays the week
# that ended two hours earlier (the settlement delay is 30 minutes).
ONBOARDED = datetime(2027, 3, 1, 4, 0, tzinfo=UTC)  # Monday 09:30 in Kolkata
TICKS = [datetime(2027, 3, day, 20, 30, tzinfo=UTC) for day in (7, 14, 21)]


@pytest.fixture
def kolkata(restaurant_factory: Any, deliver: Any) -> Restaurant:
    restaurant = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=ONBOARDED)
    for week in range(3):
        for n in range(week + 1):  # 1, 2 and 3 orders in the three weeks
            deliver(restaurant, ONBOARDED + timedelta(weeks=week, hours=3 + n), "10.00")
    return restaurant


@pytest.mark.django_db
def test_three_missed_weekly_ticks_are_caught_up_by_one_run(kolkata):
    run = pay(TICKS[-1])
    paid = weeks_of(kolkata)
    assert [p.week_start_local for p in paid] == [date(2027, 3, 1), date(2027, 3, 8), date(2027, 3, 15)]
    assert [p.order_count for p in paid] == [1, 2, 3]
    assert {p.job_run_id for p in paid} == {run.id}
    assert result(run)["payouts_written"] == 3


@pytest.mark.django_db
def test_after_an_outage_the_scheduler_claims_each_missed_tick_and_each_pays_its_own_week(kolkata):
    with registry.replaced(registry.get("weekly-payouts")):
        schedules_register(now=ONBOARDED)  # the scheduler saw the job, then went down for three weeks
        back_up = datetime(2027, 3, 22, 9, 0, tzinfo=UTC)
        with time_machine.travel(back_up, tick=False):
            report = tick_pass(now=back_up)
            drain_queue()
    assert [c.scheduled_for for c in report.claimed] == TICKS
    paid = Payout.objects.filter(restaurant=kolkata).select_related("job_run").order_by("period_start")
    assert [(p.week_start_local, p.job_run.scheduled_for if p.job_run else None) for p in paid] == [
        (date(2027, 3, 1), TICKS[0]),
        (date(2027, 3, 8), TICKS[1]),
        (date(2027, 3, 15), TICKS[2]),
    ]


@pytest.mark.django_db
def test_a_second_run_and_a_catch_up_afterwards_pay_nothing_more(kolkata):
    pay(TICKS[-1])
    before = list(Payout.objects.order_by("id").values_list("id", "gross", "job_run_id"))

    second = pay(TICKS[-1] + timedelta(hours=12))
    out = StringIO()
    with time_machine.travel(TICKS[-1] + timedelta(days=1), tick=False):
        call_command("catch_up_payouts", "--as-of", (TICKS[-1] + timedelta(hours=13)).isoformat(), stdout=out)

    assert result(second)["payouts_written"] == 0
    assert "paid nothing" in out.getvalue()
    assert list(Payout.objects.order_by("id").values_list("id", "gross", "job_run_id")) == before


@pytest.mark.django_db
def test_the_next_week_is_paid_by_the_next_run_only(kolkata, deliver):
    pay(TICKS[-1])
    deliver(kolkata, datetime(2027, 3, 24, 10, tzinfo=UTC), "7.25")
    run = pay(datetime(2027, 3, 28, 20, 30, tzinfo=UTC))
    [new] = Payout.objects.filter(job_run=run)
    assert (new.week_start_local, new.order_count, new.gross) == (date(2027, 3, 22), 1, Decimal("7.25"))


# --- What is paid -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_week_without_orders_gets_a_zero_payout_so_the_ledger_has_no_holes(restaurant_factory):
    quiet = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=ONBOARDED)
    pay(TICKS[-1])
    assert [(p.order_count, p.gross, p.commission, p.net) for p in weeks_of(quiet)] == [
        (0, Decimal(0), Decimal(0), Decimal(0))
    ] * 3


@pytest.mark.django_db
def test_weeks_start_at_the_onboarding_week_and_wait_for_the_settlement_delay(restaurant_factory, settings):
    settings.PAYOUT_SETTLEMENT_DELAY_SECONDS = 3600
    restaurant = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=datetime(2027, 3, 10, 6, tzinfo=UTC))
    week_end = datetime(2027, 3, 14, 18, 30, tzinfo=UTC)
    pay(week_end + timedelta(minutes=59))
    assert weeks_of(restaurant) == []
    pay(week_end + timedelta(minutes=60))
    assert [p.week_start_local for p in weeks_of(restaurant)] == [date(2027, 3, 8)]


@pytest.mark.django_db
def test_only_delivered_orders_count_and_commission_rounds_half_up(restaurant_factory, order_factory, deliver):
    restaurant = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=ONBOARDED, commission_rate=Decimal("0.25"))
    deliver(restaurant, ONBOARDED + timedelta(hours=2), "6.10")  # 6.10 x 0.25 = 1.525
    for status in (OrderStatus.PLACED, OrderStatus.ACCEPTED, OrderStatus.REJECTED, OrderStatus.CANCELLED):
        order_factory(status, restaurant=restaurant, total=Decimal("99.99"), placed_at=ONBOARDED + timedelta(hours=3))
    pay(TICKS[0])
    [week] = weeks_of(restaurant)
    assert (week.order_count, week.gross, week.commission, week.net) == (
        1,
        Decimal("6.10"),
        Decimal("1.53"),  # half-up; half-even would give 1.52
        Decimal("4.57"),
    )


@pytest.mark.django_db
def test_a_restaurant_deactivated_before_onboarding_week_ends_is_paid_that_week_and_no_more(restaurant_factory):
    closed = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=ONBOARDED)
    restaurant_deactivate(restaurant_id=closed.pk, now=ONBOARDED + timedelta(hours=1))
    pay(TICKS[-1])
    [payout] = weeks_of(closed)
    assert payout.period_start <= ONBOARDED < payout.period_end


@pytest.mark.django_db
def test_a_run_stamps_its_payouts_with_the_run_the_fence_and_the_write_time(kolkata):
    clock_at = TICKS[0] + timedelta(hours=2, seconds=7)
    run = pay(TICKS[0], clock_at=clock_at)
    [payout] = weeks_of(kolkata)
    assert (payout.job_run_id, payout.fence, payout.created_at) == (run.id, run.fence, clock_at)


@pytest.mark.django_db
def test_batches_write_the_same_payouts_as_one_statement(restaurant_factory, deliver):
    restaurants = [
        restaurant_factory(timezone=zone, onboarded_at=ONBOARDED)
        for zone in ("Asia/Kolkata", "Europe/London", "America/New_York", "Asia/Kolkata", "Europe/London")
    ]
    for n, restaurant in enumerate(restaurants):
        deliver(restaurant, ONBOARDED + timedelta(days=n, hours=8), f"{10 + n}.50")
    progress: list[BatchProgress] = []
    with transaction.atomic():
        in_batches = payouts_pay_due(
            as_of=TICKS[-1],
            run=TokenOnly(fence=1, now=TICKS[-1]),
            now=TICKS[-1],
            batch_size=2,
            on_batch=progress.append,
        )
        rows = sorted(Payout.objects.values_list("restaurant_id", "period_start", "gross", "order_count"))
        transaction.set_rollback(True)
    at_once = payouts_pay_due(as_of=TICKS[-1], run=TokenOnly(fence=2, now=TICKS[-1]), now=TICKS[-1])
    assert (in_batches.batches, at_once.batches) == (3, 1)
    assert [p.restaurants_done for p in progress] == [2, 4, 5]
    assert in_batches.written == at_once.written == len(rows) > 0
    assert sorted(Payout.objects.values_list("restaurant_id", "period_start", "gross", "order_count")) == rows


@pytest.mark.django_db
def test_a_long_history_is_paid_once_and_a_weekly_run_then_checks_only_the_newest_weeks(restaurant_factory, deliver):
    onboarded = ONBOARDED - timedelta(weeks=20)
    old = [restaurant_factory(timezone=zone, onboarded_at=onboarded) for zone in ("Asia/Kolkata", "Europe/London")]
    for week in range(0, 22, 3):
        deliver(old[0], onboarded + timedelta(weeks=week, hours=5), "30.00")
    first = pay(TICKS[0])
    # Every week since onboarding, zero weeks included; London's 21st week ends at
    # midnight UTC, after this Sunday-evening tick.
    assert result(first)["payouts_written"] == 21 + 20
    for restaurant, weeks in zip(old, (21, 20), strict=True):
        paid = weeks_of(restaurant)
        assert len(paid) == weeks
        assert all(a.period_end == b.period_start for a, b in itertools.pairwise(paid))
    assert sum(p.gross for p in weeks_of(old[0])) == Decimal("30.00") * 7

    # A week later only the newest weeks are unpaid (one in Kolkata, two in London), and
    # only they are considered, not the twenty before.
    as_of = TICKS[1] + timedelta(hours=12)
    [batch] = payout_batches(ids=[r.pk for r in old], restricted=False)
    considered = payout_weeks_due(batch=batch, as_of=as_of)
    assert sorted((w.timezone, w.week_start_local) for w in considered) == [
        ("Asia/Kolkata", date(2027, 3, 8)),
        ("Europe/London", date(2027, 3, 1)),
        ("Europe/London", date(2027, 3, 8)),
    ]
    assert result(pay(as_of))["payouts_written"] == 3


@pytest.mark.django_db
def test_a_ledger_further_behind_than_the_recent_weeks_is_paid_in_the_same_run_without_a_gap(
    restaurant_factory, deliver
):
    onboarded = ONBOARDED - timedelta(weeks=20)
    current, behind = (restaurant_factory(timezone="Asia/Kolkata", onboarded_at=onboarded) for _ in range(2))
    # Only `current` is paid through the tick before.
    payout_catch_up_execute(as_of=TICKS[0], restaurant_ids=[current.pk], now=TICKS[0], worker="test")
    deliver(behind, onboarded + timedelta(weeks=3, hours=5), "30.00")

    # One weekly run, both in one batch: `current` from the recent weeks, `behind` (21
    # weeks unpaid, beyond SHORT_HISTORY) from the weeks that reach back to its onboarding.
    assert result(pay(TICKS[1]))["payouts_written"] == 1 + 22
    for restaurant in (current, behind):
        paid = weeks_of(restaurant)
        assert len(paid) == 22
        assert paid[0].period_start <= onboarded < paid[0].period_end
        assert all(a.period_end == b.period_start for a, b in itertools.pairwise(paid))
    assert sum(p.gross for p in weeks_of(behind)) == Decimal("30.00")


@pytest.mark.django_db
def test_the_payout_sql_pays_no_ledger_its_weeks_do_not_reach_back_to(restaurant_factory):
    restaurant = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=ONBOARDED - timedelta(weeks=3))
    [batch] = payout_batches(ids=[restaurant.pk], restricted=False)
    recent = [week for week in payout_weeks_due(batch=batch, as_of=TICKS[1]) if week.period_start > ONBOARDED]
    assert recent, "the last weeks alone start after the onboarding"
    # Paying from them would leave the weeks before unpaid for good: nothing is written.
    with transaction.atomic():
        assert sql.payouts_insert_due(batch=batch, weeks=recent, job_run_id=None, fence=1, now=TICKS[1]) == []
    assert not Payout.objects.exists()


# --- Fencing ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_stale_fence_writes_nothing(kolkata):
    with transaction.atomic():
        fence_check(PAYOUT_FENCE_RESOURCE, 100, now=TICKS[-1])  # a newer run has written
    with pytest.raises(StaleFenceError):
        payouts_pay_due(as_of=TICKS[-1], run=TokenOnly(fence=99, now=TICKS[-1]), now=TICKS[-1])
    assert not Payout.objects.exists()


@pytest.mark.django_db
def test_a_run_whose_fence_a_newer_run_passed_is_refused_through_its_context(kolkata):
    # The job's own path: weekly_payouts hands its RunContext to the pass, whose batches
    # call ctx.fence_check(PAYOUT_FENCE_RESOURCE); the run is still running, but a newer
    # token was accepted for the ledger.
    ctx = RunContext(
        run_id=JobRun.objects.create(
            job_name="weekly-payouts",
            scheduled_for=TICKS[-1],
            due_at=TICKS[-1],
            status=RunStatus.RUNNING,
            trigger=Trigger.MANUAL,
            created_at=TICKS[-1],
            fence=99,
        ).pk,
        job_name="weekly-payouts",
        subject="",
        scheduled_for=TICKS[-1],
        fence=99,
        attempt=1,
        trigger=Trigger.MANUAL,
    )
    with transaction.atomic():
        fence_check(PAYOUT_FENCE_RESOURCE, 100, now=TICKS[-1])  # a newer run has written
    with pytest.raises(StaleFenceError, match="a newer run has written it"), time_machine.travel(TICKS[-1], tick=False):
        weekly_payouts(ctx)
    assert not Payout.objects.exists()
    # The same run restarted under the newest token pays: the refusal was the fence's.
    JobRun.objects.filter(pk=ctx.run_id).update(fence=101)
    with time_machine.travel(TICKS[-1], tick=False):
        assert weekly_payouts(dataclasses.replace(ctx, fence=101))["payouts_written"] == 3


@pytest.mark.django_db
def test_a_worker_that_lost_its_run_is_refused_at_the_write(kolkata):
    job = registry.get("weekly-payouts")
    with registry.replaced(job), time_machine.travel(TICKS[-1], tick=False):
        run = run_claim_manual(job_name=job.name, scheduled_for=TICKS[-1], now=TICKS[-1], enqueue=False)
        assert run is not None
        [paused] = runs_start(job=job, run_ids=[run.id], now=TICKS[-1], worker="paused")
    # The paused worker shows no sign of life: its run is abandoned and retried elsewhere.
    later = TICKS[-1] + timedelta(seconds=job.timeout_seconds + 1)
    retry_at = later + timedelta(seconds=job.backoff_for(1) + 1)
    with registry.replaced(job), time_machine.travel(retry_at, tick=False):
        assert runs_abandon_silent(now=later) == (1, 0)
        tick_pass(now=retry_at)
        drain_queue()
    run.refresh_from_db()
    assert (run.status, run.attempts) == (RunStatus.SUCCEEDED, 2)
    assert run.fence is not None and run.fence > paused.fence

    # The paused worker wakes up and carries on with its old context.
    with pytest.raises(StaleFenceError), time_machine.travel(retry_at + timedelta(minutes=1), tick=False):
        weekly_payouts(paused)
    assert Payout.objects.count() == 3
    assert set(Payout.objects.values_list("fence", flat=True)) == {run.fence}


@pytest.mark.django_db
def test_a_restricted_run_reads_its_restaurants_from_the_subject(kolkata, restaurant_factory):
    other = restaurant_factory(timezone="Asia/Kolkata", onboarded_at=ONBOARDED)
    ctx = RunContext(
        run_id=JobRun.objects.create(
            job_name="weekly-payouts",
            subject=f"restaurants:{kolkata.pk}",
            scheduled_for=TICKS[-1],
            due_at=TICKS[-1],
            status=RunStatus.RUNNING,
            trigger=Trigger.MANUAL,
            created_at=TICKS[-1],
            fence=5,
        ).pk,
        job_name="weekly-payouts",
        subject=f"restaurants:{kolkata.pk}",
        scheduled_for=TICKS[-1],
        fence=5,
        attempt=1,
        trigger=Trigger.MANUAL,
    )
    with time_machine.travel(TICKS[-1], tick=False):
        result = weekly_payouts(ctx)
    assert result["payouts_written"] == 3
    assert set(Payout.objects.values_list("restaurant_id", flat=True)) == {kolkata.pk}
    assert not weeks_of(other)


# --- The seeded, multi-zone data set -------------------------------------------------------


@pytest.mark.django_db
def test_payouts_of_a_seeded_multi_zone_data_set_add_up_to_the_delivered_orders(settings):
    seed_now = datetime(2027, 3, 31, 12, 0, tzinfo=UTC)  # the spring DST week in London and New York
    call_command("seed_demo", "--restaurants", "6", "--weeks", "4", "--now", seed_now.isoformat(), stdout=StringIO())
    pay(seed_now)

    expected = _weeks_by_hand(seed_now, delay=timedelta(seconds=settings.PAYOUT_SETTLEMENT_DELAY_SECONDS))
    paid = {
        (p.restaurant_id, p.week_start_local): (p.order_count, p.gross, p.commission, p.net)
        for p in Payout.objects.all()
    }
    assert paid == expected
    for restaurant in Restaurant.objects.all():
        payouts = weeks_of(restaurant)
        inside = Order.objects.filter(
            restaurant=restaurant,
            status=OrderStatus.DELIVERED,
            delivered_at__gte=payouts[0].period_start,
            delivered_at__lt=payouts[-1].period_end,
        )
        assert sum(p.gross for p in payouts) == sum(o.total for o in inside)
        assert sum(p.order_count for p in payouts) == inside.count() > 0


Expected = dict[tuple[int, date], tuple[int, Decimal, Decimal, Decimal]]


def _weeks_by_hand(as_of: datetime, *, delay: timedelta) -> Expected:
    """The oracle: each delivered order's local Monday, worked out one order at a time in
    Python, without the UTC week bounds the job computes."""
    totals: dict[tuple[int, date], list[Any]] = defaultdict(lambda: [0, Decimal("0")])
    restaurants = {r.pk: r for r in Restaurant.objects.all()}
    for restaurant in restaurants.values():
        zone = ZoneInfo(restaurant.timezone)
        monday = _monday(restaurant.onboarded_at.astimezone(zone).date())
        while _local_midnight(monday + timedelta(days=7), zone) + delay <= as_of:
            totals[(restaurant.pk, monday)]  # every finished week, with or without orders
            monday += timedelta(days=7)
    for order in Order.objects.filter(status=OrderStatus.DELIVERED):
        assert order.delivered_at is not None
        zone = ZoneInfo(restaurants[order.restaurant_id].timezone)
        key = (order.restaurant_id, _monday(order.delivered_at.astimezone(zone).date()))
        if key in totals:
            totals[key][0] += 1
            totals[key][1] += order.total
    expected = {}
    for (restaurant_id, monday), (count, gross) in totals.items():
        commission = (gross * restaurants[restaurant_id].commission_rate).quantize(CENT, rounding=ROUND_HALF_UP)
        expected[(restaurant_id, monday)] = (count, gross, commission, gross - commission)
    return expected


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _local_midnight(day: date, zone: ZoneInfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


@pytest.mark.django_db
def test_a_restaurant_moved_to_another_zone_after_payouts_is_never_paid_twice_for_the_same_hours():
    london = _restaurant_paid_once_for_review()
    paid = Payout.objects.filter(restaurant=london).aggregate(total=Sum("gross"))["total"]
    Restaurant.objects.filter(id=london.id).update(timezone="Asia/Kolkata")
    payouts_pay_due(as_of=TICKS[-1], run=TokenOnly(fence=50, now=TICKS[-1]), now=TICKS[-1])
    weeks = list(Payout.objects.filter(restaurant=london).order_by("period_start"))
    assert all(a.period_end <= b.period_start for a, b in itertools.pairwise(weeks))
    assert Payout.objects.filter(restaurant=london).aggregate(total=Sum("gross"))["total"] == paid


def _restaurant_paid_once_for_review():
    restaurant = Restaurant.objects.create(
        name="Moving Kitchen",
        timezone="Europe/London",
        commission_rate=Decimal("0.2000"),
        onboarded_at=TICKS[0] - timedelta(days=21),
    )
    delivered = TICKS[0] - timedelta(days=3)
    Order.objects.create(
        restaurant=restaurant,
        customer_ref="c-1",
        total=Decimal("1800.00"),
        status=OrderStatus.DELIVERED,
        placed_at=delivered - timedelta(minutes=40),
        delivered_at=delivered,
    )
    payouts_pay_due(as_of=TICKS[-1], run=TokenOnly(fence=40, now=TICKS[-1]), now=TICKS[-1])
    return restaurant
