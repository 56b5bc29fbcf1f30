"""The simulation report's checks, on database states built by hand: each invariant is
shown to fail when it should (a report that always said "all good" would pass the
end-to-end runs too), and ``simulate`` refuses bad input before starting anything."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from orders.models import Order, OrderStatus
from payouts.models import Payout
from scheduling.models import (
    JobKind,
    JobRun,
    JobRunEvent,
    Misfire,
    Overlap,
    RunStatus,
    Schedule,
    SchedulerNode,
    Trigger,
)
from simulation.models import ProbeCharge
from simulation.report import DEAD_BY_FAULTS, simulation_report
from simulation.services import SimulationResetError, simulation_reset
from tests.engine import pay
from tests.ledger_data import written_unguarded

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
WINDOW_END = T0 + timedelta(minutes=60)

pytestmark = pytest.mark.django_db


def _schedule(job_name: str = "every-10", cron: str = "*/10 * * * *") -> Schedule:
    return Schedule.objects.create(
        job_name=job_name,
        kind=JobKind.CRON,
        cron=cron,
        timezone="UTC",
        overlap=Overlap.ALLOW,
        misfire=Misfire.CATCH_UP,
        max_attempts=3,
        backoff_seconds=30,
        timeout_seconds=600,
        heartbeat=False,
        batch_size=1,
        first_seen_at=T0,
        registered_at=T0,
    )


def _run(tick: datetime, status: str = RunStatus.SUCCEEDED, job_name: str = "every-10", **fields: Any) -> JobRun:
    values: dict[str, Any] = {
        "job_name": job_name,
        "scheduled_for": tick,
        "due_at": tick,
        "status": status,
        "trigger": Trigger.CRON,
        "created_at": tick,
        "attempts": 1,
        "fence": 1,
    }
    return JobRun.objects.create(**{**values, **fields})


@pytest.fixture
def window() -> list[datetime]:
    """A job ticking every 10 minutes, a scheduler whose last pass closes the window: six ticks."""
    _schedule()
    SchedulerNode.objects.create(name="scheduler@test:1", started_at=T0, last_pass_at=WINDOW_END)
    return [T0 + timedelta(minutes=10 * i) for i in range(1, 7)]


def test_every_tick_run_once_holds(window: list[datetime]) -> None:
    for tick in window:
        _run(tick)
    report = simulation_report(extra_problems=[])
    assert report.ok, report.problems
    [ticks] = report.jobs
    assert (ticks.expected, ticks.succeeded, ticks.never_claimed) == (6, 6, 0)


def test_a_tick_no_scheduler_claimed_is_a_miss(window: list[datetime]) -> None:
    for tick in window[:-1]:
        _run(tick)
    report = simulation_report(extra_problems=[])
    assert report.jobs[0].never_claimed == 1
    assert report.problems == ["every-10: 1 ticks never claimed"]


def test_a_skip_with_a_reason_is_explained_and_a_dead_run_is_not(window: list[datetime]) -> None:
    _run(window[0], RunStatus.SKIPPED, skip_reason="overlap")
    _run(window[1], RunStatus.DEAD)
    for tick in window[2:]:
        _run(tick)
    report = simulation_report(extra_problems=[])
    assert report.jobs[0].skipped == {"overlap": 1}
    assert report.problems == ["unfinished: every-10  @ 2027-03-01 12:20: dead"]


def test_a_dead_run_says_how_each_of_its_attempts_ended(window: list[datetime]) -> None:
    # A chaos run that failed this way left only the line: which fault or late heartbeat
    # spent the attempts was in logs already deleted.
    dead = _run(window[1], RunStatus.DEAD, attempts=3)
    traceback = "Traceback (most recent call last):\n  ...\npsycopg.OperationalError: server closed the connection\n"
    for attempt, kind, message in [
        (1, "started", ""),
        (1, "abandoned", "no heartbeat since 2027-03-01 12:20:15 UTC from vm:41"),
        (2, "failed", traceback),
        (3, "dead", "no heartbeat since 2027-03-01 12:26:40 UTC from vm:42"),
    ]:
        at = window[1] + timedelta(minutes=3 * attempt)
        JobRunEvent.objects.create(run=dead, at=at, kind=kind, attempt=attempt, message=message)
    for tick in [window[0], *window[2:]]:
        _run(tick)
    report = simulation_report(extra_problems=[])
    assert report.problems == [
        "unfinished: every-10  @ 2027-03-01 12:20: dead after 3 attempts ("
        "1. abandoned at 12:23:00: no heartbeat since 2027-03-01 12:20:15 UTC from vm:41; "
        "2. failed at 12:26:00: psycopg.OperationalError: server closed the connection; "
        "3. dead at 12:29:00: no heartbeat since 2027-03-01 12:26:40 UTC from vm:42)"
    ]


def test_a_dead_run_is_explained_only_when_an_injected_fault_landed_in_every_attempt(
    window: list[datetime],
) -> None:
    # The payout and sender kills take their worker whatever else it runs: with an earlier
    # pause, three faults can land in one settlement run's three attempts.
    dead = _run(window[1], RunStatus.DEAD, attempts=3)
    for tick in [window[0], *window[2:]]:
        _run(tick)
    two_of_three = simulation_report(extra_problems=[], struck={dead.id: {11, 12}})
    assert two_of_three.problems == ["unfinished: every-10  @ 2027-03-01 12:20: dead"]
    # A fault in each attempt (a fence per attempt; one attempt struck twice counts once): explained.
    report = simulation_report(extra_problems=[], struck={dead.id: {11, 12, 13}})
    assert report.ok, report.problems
    assert report.jobs[0].skipped == {DEAD_BY_FAULTS: 1}


def test_a_retry_due_after_the_window_is_explained_and_one_due_inside_it_is_not(window: list[datetime]) -> None:
    _run(window[0], RunStatus.ABANDONED, due_at=WINDOW_END + timedelta(minutes=1))
    _run(window[1], RunStatus.FAILED, due_at=WINDOW_END - timedelta(minutes=1))
    for tick in window[2:]:
        _run(tick)
    report = simulation_report(extra_problems=[])
    assert report.jobs[0].retry_pending == 1
    assert report.problems == ["unfinished: every-10  @ 2027-03-01 12:20: failed"]


def test_the_window_ends_where_the_simulation_said_not_at_the_settling_schedulers_last_pass(
    window: list[datetime],
) -> None:
    """After the end the servers go on until the window's runs settle: their later ticks
    are not the window's (counted, they would show more runs than ticks)."""
    for tick in window[:-1]:
        _run(tick, finished_at=tick + timedelta(minutes=1))
    _run(window[-1], finished_at=WINDOW_END + timedelta(minutes=25))  # lost with a worker, back while settling
    SchedulerNode.objects.update(last_pass_at=WINDOW_END + timedelta(minutes=30))
    _run(WINDOW_END + timedelta(minutes=10), finished_at=WINDOW_END + timedelta(minutes=11))
    _run(WINDOW_END + timedelta(minutes=20), RunStatus.RUNNING, attempts=2)
    report = simulation_report(extra_problems=[], window_end=WINDOW_END)
    assert report.ok, report.problems
    assert (report.window_end, report.jobs[0].expected, report.jobs[0].succeeded) == (WINDOW_END, 6, 6)
    assert (report.recovery["finished_after_the_end"], report.recovery["runs_retried"]) == (1, 0)
    # A stop by signal before the last pass: the window ends at that pass, not later.
    assert simulation_report(extra_problems=[], window_end=WINDOW_END + timedelta(hours=1)).jobs[0].expected == 9
    unbounded = simulation_report(extra_problems=[])
    assert (unbounded.jobs[0].expected, unbounded.jobs[0].succeeded) == (9, 7)


def test_a_tick_charged_twice_is_a_duplicate(window: list[datetime]) -> None:
    runs = [_run(tick) for tick in window]
    for run in [*runs, runs[2]]:
        ProbeCharge.objects.create(
            job_name=run.job_name,
            scheduled_for=run.scheduled_for,
            run=run,
            fence=1,
            attempt=1,
            worker="w",
            charged_at=T0,
        )
    report = simulation_report(extra_problems=[])
    assert (report.duplicate_charges, report.charged_ticks) == (1, 6)
    assert report.problems == ["1 duplicate probe charges"]


def _paid_weekly(restaurant_factory: Any) -> Any:
    """A live scheduler, the weekly-payouts schedule and a restaurant onboarded on Monday
    2027-03-01 in UTC: what the report's payout checks read."""
    SchedulerNode.objects.create(name="scheduler@test:1", started_at=T0, last_pass_at=WINDOW_END)
    _schedule("weekly-payouts", "30 20 * * 0")
    return restaurant_factory(timezone="UTC", onboarded_at=datetime(2027, 3, 1, tzinfo=UTC))


def test_payouts_are_checked_against_their_orders_and_for_unpaid_weeks(
    restaurant_factory: Any, order_factory: Any
) -> None:
    # Onboarded on a Monday in UTC: by Sunday 2027-03-21 20:30 two weeks are settled.
    restaurant = _paid_weekly(restaurant_factory)
    order_factory(OrderStatus.DELIVERED, restaurant=restaurant, total=Decimal("40.00"), placed_at=T0)
    tick = datetime(2027, 3, 21, 20, 30, tzinfo=UTC)
    run = _run(tick, job_name="weekly-payouts")
    week = {"period_start": datetime(2027, 3, 1, tzinfo=UTC), "period_end": datetime(2027, 3, 8, tzinfo=UTC)}
    Payout.objects.create(
        restaurant=restaurant,
        **week,
        week_start_local=week["period_start"].date(),
        gross=Decimal("41.00"),  # the order says 40.00
        commission=Decimal("6.15"),
        net=Decimal("34.85"),
        order_count=1,
        commission_rate=restaurant.commission_rate,
        tzdata_version="2026f",
        job_run=run,
        fence=1,
        created_at=tick,
    )
    report = simulation_report(extra_problems=[])
    assert report.payouts.as_of == tick
    assert len(report.payouts.wrong_amounts) == 1 and "payout" in report.payouts.wrong_amounts[0]
    assert report.payouts.unpaid_weeks == 1  # the week of 2027-03-08 has no payout


def test_the_ledger_invariant_is_a_line_of_the_report_even_when_every_payout_matches_its_orders(
    restaurant_factory: Any, order_factory: Any
) -> None:
    restaurant = _paid_weekly(restaurant_factory)
    # Delivered before the restaurant's first week (refused now; written before that
    # refusal existed): in no payout, though each payout is right.
    written_unguarded(restaurant, delivered_at=datetime(2027, 2, 26, 12, 2, tzinfo=UTC), total="40.00")
    pay(datetime(2027, 3, 21, 20, 30, tzinfo=UTC))
    report = simulation_report(extra_problems=[])
    payouts = report.payouts
    assert (payouts.checked, payouts.wrong_amounts, payouts.duplicates, payouts.unpaid_weeks) == (2, [], 0, 0)
    [line] = payouts.ledger
    assert line.startswith(f"restaurant {restaurant.pk}: ") and "delivered before then total 40.00" in line
    # The only payout problem (the order's own cancellation run and the send-transfers tick
    # the payout run claimed, never executed here, are others).
    never_executed = ("unfinished: cancel-stale-order", "unfinished: send-transfers")
    assert [p for p in report.problems if not p.startswith(never_executed)] == [f"ledger: {line}"]


def _rush_order_after(window: list[datetime], order_factory: Any) -> Order:
    """Every tick of ``window`` run, then an order of the rush placed at T0 (named as the
    simulation names its orders), still placed."""
    for tick in window:
        _run(tick)
    order = order_factory(OrderStatus.PLACED, placed_at=T0)
    Order.objects.filter(pk=order.pk).update(customer_ref="rush-00001")
    return order


def test_an_order_cancelled_before_its_deadline_breaks_the_invariant_whatever_the_skew(
    window: list[datetime], order_factory: Any
) -> None:
    order = _rush_order_after(window, order_factory)
    Order.objects.filter(pk=order.pk).update(status=OrderStatus.CANCELLED, cancelled_at=T0 + timedelta(seconds=570))
    assert simulation_report(extra_problems=[]).problems == ["orders cancelled early: 1"]
    # The database's clock judges deadlines: no scheduler's skew explains an early one.
    assert simulation_report(extra_problems=[], clock_skew=90).problems == ["orders cancelled early: 1"]


def test_an_order_left_unanswered_past_its_deadline_is_a_miss_unless_the_design_explains_it(
    window: list[datetime], order_factory: Any
) -> None:
    order = _rush_order_after(window, order_factory)
    cancellation = JobRun.objects.get(job_name="cancel-stale-order", subject=f"order:{order.pk}")
    deadline = cancellation.scheduled_for
    assert simulation_report(extra_problems=[]).orders.overdue_unanswered == 1
    # Handed out early by a fast scheduler clock: the worker left the order to the safety net.
    JobRun.objects.filter(pk=cancellation.pk).update(
        status=RunStatus.SUCCEEDED, started_at=deadline - timedelta(seconds=30), finished_at=deadline
    )
    assert simulation_report(extra_problems=[]).orders.overdue_unanswered == 0
    # ... but once a safety-net tick as of the deadline succeeded, nothing explains it.
    _run(deadline + timedelta(minutes=5), job_name="cancel-stale-orders")
    assert simulation_report(extra_problems=[]).orders.overdue_unanswered == 1
    # ... unless a clock skew of that much means the tick may have run before the deadline.
    assert simulation_report(extra_problems=[], clock_skew=360).orders.overdue_unanswered == 0


def test_reset_forgets_the_engine_state_and_keeps_the_orders(window: list[datetime], order_factory: Any) -> None:
    run = _run(window[0])
    ProbeCharge.objects.create(
        job_name=run.job_name, scheduled_for=run.scheduled_for, run=run, fence=1, attempt=1, worker="w", charged_at=T0
    )
    order_factory(OrderStatus.DELIVERED)
    simulation_reset(development=True)
    assert (JobRun.objects.count(), ProbeCharge.objects.count(), Schedule.objects.count()) == (0, 0, 0)
    assert SchedulerNode.objects.count() == 0 and Order.objects.count() == 1


def test_reset_outside_development_settings_refuses_and_forgets_nothing(window: list[datetime]) -> None:
    _run(window[0])
    with pytest.raises(SimulationResetError, match=r"DEBUG is off\): it would delete 1 job runs, 1 schedules"):
        simulation_reset(development=False)
    assert (JobRun.objects.count(), Schedule.objects.count()) == (1, 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--speed", "5000"], "--speed 5000"),
        (["--duration", "2 hours"], "is not a duration"),
        (["--duration", "5m"], "give 10m to 14d"),
        (["--crash-worker", "3h", "--duration", "2h"], "inside the 2:00:00"),
        (["--kill-scheduler", "--servers", "1"], "at least 2 servers"),
        (["--start", "yesterday"], "not an ISO 8601"),
        (["--crash-worker", "--fault-job", "cancel-stale-order"], "not a cron job of this project or a probe job"),
        (["--fault-job", "weekly-payout"], "'weekly-payout': not a cron job"),
    ],
)
def test_simulate_refuses_bad_input_before_starting_anything(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("simulate", *argv)
    assert JobRun.objects.count() == 0 and Schedule.objects.count() == 0


def test_simulate_refuses_a_database_with_runs_unless_told_to_reset(window: list[datetime]) -> None:
    _run(window[0])
    with pytest.raises(CommandError, match="already has 1 job runs, 1 schedules; pass --reset"):
        call_command("simulate")
    assert JobRun.objects.count() == 1
