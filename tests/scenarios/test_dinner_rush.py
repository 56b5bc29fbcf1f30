"""Scenario 9, the dinner rush: orders arrive at a sustained rate, restaurants accept most
of them, and every order nobody answered in time must be cancelled, once, and never one
that was accepted.

``manage.py simulate_orders`` places the orders through ``orders.services.order_place``
(each order and its delayed cancellation commit together) and answers them as drawn;
two schedulers and two workers cancel what is left, in batches. Run twice: with every
clock right, and with schedulers and workers 90 seconds fast and slow, where the
database's clock still decides every deadline.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from scheduling.models import IN_FLIGHT_STATUSES
from support.processes import SimulatedTime, wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS, STALL_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 5, 18, 30, tzinfo=UTC)  # Friday dinner in London
SPEED = 60.0  # a simulated minute per real second: an order has 10 s to be answered
RUSH_MINUTES = 15
PER_MINUTE = 20
TIMEOUT = timedelta(seconds=600)  # ORDER_ACCEPT_TIMEOUT_SECONDS
RUSH = "customer_ref LIKE 'rush-%%'"
IN_FLIGHT = [str(status) for status in IN_FLIGHT_STATUSES]  # not finished: still to act


SKEW = 90.0


def test_every_order_unanswered_in_time_is_cancelled_once_and_no_accepted_one_is(scenario: Scenario) -> None:
    _rush(scenario, scheduler_skews=(0.0, 0.0), worker_skews=(0.0, 0.0))


def test_with_clocks_90_seconds_apart_no_order_is_cancelled_early_or_left_past_the_safety_net(
    scenario: Scenario,
) -> None:
    _rush(scenario, scheduler_skews=(-SKEW, SKEW), worker_skews=(SKEW, -SKEW))
    # Not late either. An order's own run cancels it if it runs after the deadline, by the
    # database's clock; one a fast scheduler handed out early leaves it alone, and so does
    # the safety net while that run is in flight (a run still to act is trusted to act,
    # however late a busy machine runs it). So an order is left past the safety net when
    # it was cancelled after its own run finished (the handler's UPDATE commits before the
    # worker reads its clock for the finish) and after the first safety-net run that
    # surely started past both its deadline and that finish. All job_runs times are a
    # worker's clock, up to SKEW off the database's, which decides the deadline and stamps
    # cancelled_at: two stamps from different workers are up to 2 * SKEW apart. (A
    # safety-net run selects after its start and before its finish; how soon after its
    # tick it starts depends on the machine, so the bound is that run, not a number of
    # seconds. One gap is left: a run's finish commits after its worker read the clock for
    # it, and a safety-net run starting in between still sees the run in flight although
    # this bound counts on it; between a slow and a fast worker the skews leave no slack.)
    late = (
        f"SELECT count(*) FROM orders_order o JOIN job_runs own ON own.job_name = 'cancel-stale-order' "
        f"AND own.subject = 'order:' || o.id WHERE o.{RUSH} AND o.cancelled_at > own.finished_at + %(skew)s "
        "AND o.cancelled_at > %(skew)s + (SELECT min(r.finished_at) FROM job_runs r "
        "WHERE r.job_name = 'cancel-stale-orders' AND r.status = 'succeeded' "
        "AND r.started_at >= greatest(o.placed_at + %(timeout)s, own.finished_at + %(skew)s) + %(skew)s)"
    )
    assert scenario.db.scalar(late, {"skew": timedelta(seconds=SKEW), "timeout": TIMEOUT}) == 0


def _rush(scenario: Scenario, *, scheduler_skews: tuple[float, float], worker_skews: tuple[float, float]) -> None:
    clock = SimulatedTime.starting(START, speed=SPEED, lead=4.0)
    scenario.seed(restaurants=12, weeks=1, now=START)
    scenario.start_workers(clock, 2, q_workers=2, skews=worker_skews)
    scenario.start_schedulers(clock, 2, skews=scheduler_skews)
    clock.sleep_until(START)
    driver = scenario.fleet.start(
        "orders",
        ["simulate_orders", "--per-minute", str(PER_MINUTE), "--minutes", str(RUSH_MINUTES)],
        env=clock.environment(),
    )
    # The driver runs on the simulated clock: its rush and the last answers' deadline.
    traffic = (RUSH_MINUTES * 60 + TIMEOUT.total_seconds()) / SPEED
    wait_for(lambda: not driver.alive(), timeout=traffic + STALL_SECONDS, what="the order traffic")
    assert driver.popen is not None and driver.popen.returncode == 0, driver.log_tail()
    answered = _traffic_counts(driver.log_tail())
    db = scenario.db
    # Every order's deadline passes, and its cancellation run executes: wait while orders
    # are answered or cancelled and runs finish. (The deadlines still ahead are at most
    # TIMEOUT away, so that long may pass before the next step.) The schedulers stop only
    # then: a run still scheduled would never be handed out.
    left = (
        f"SELECT (SELECT count(*) FROM orders_order WHERE {RUSH} AND status = 'placed') + "
        "(SELECT count(*) FROM job_runs WHERE job_name = 'cancel-stale-order' AND status = ANY(%s))"
    )
    stall = STALL_SECONDS + TIMEOUT.total_seconds() / SPEED
    scenario.wait_until_none(left, [list(IN_FLIGHT)], stall=stall, what="the last cancellations")
    scenario.stop("scheduler")
    scenario.wait_until_idle()
    scenario.stop("worker")

    statuses = db.counts(f"SELECT status, count(*) FROM orders_order WHERE {RUSH} GROUP BY status")
    # How many orders the driver placed, and how many answers it got in before their
    # deadline, depend on how fast this machine runs it: the database must agree with
    # the driver's own account, whatever the numbers.
    assert sum(statuses.values()) == answered["placed"] > 0
    fates = ("accepted", "rejected", "unanswered", "late answer refused")
    assert sum(answered[fate] for fate in fates) == answered["placed"] and answered["failed requests"] == 0
    assert statuses["accepted"] == answered["accepted"] > 0
    assert statuses.get("rejected", 0) == answered["rejected"]
    # What nobody answered in time, and only that, was cancelled.
    assert statuses["cancelled"] == answered["unanswered"] + answered["late answer refused"]
    assert set(statuses) <= {"accepted", "rejected", "cancelled"}
    assert (
        db.scalar(
            f"SELECT count(*) FROM orders_order WHERE {RUSH} AND accepted_at IS NOT NULL AND cancelled_at IS NOT NULL"
        )
        == 0
    )
    # Never early: each cancellation came at or after the order's deadline, whatever the
    # clocks of the scheduler that handed it out and of the worker that ran it said.
    early = f"SELECT count(*) FROM orders_order WHERE {RUSH} AND cancelled_at < placed_at + %s"
    assert db.scalar(early, [TIMEOUT]) == 0
    _assert_one_cancellation_run_per_order(scenario)


def _assert_one_cancellation_run_per_order(scenario: Scenario) -> None:
    db = scenario.db
    runs = db.counts(
        "SELECT o.id, count(r.id) FROM orders_order o LEFT JOIN job_runs r "
        "ON r.job_name = 'cancel-stale-order' AND r.subject = 'order:' || o.id "
        f"WHERE o.{RUSH} GROUP BY o.id"
    )
    assert set(runs.values()) == {1}, "every order has exactly one delayed cancellation run"
    outcomes = db.counts(
        "SELECT status || ':' || attempts, count(*) FROM job_runs WHERE job_name = 'cancel-stale-order' GROUP BY 1"
    )
    assert outcomes == {"succeeded:1": len(runs)}
    # Once: the batches' conditional UPDATEs changed exactly as many orders as are cancelled.
    # (A batch stores its result on each of its runs; its runs share the fence it started with.)
    changed = db.scalar(
        "SELECT sum(cancelled) FROM (SELECT DISTINCT fence, (result->>'cancelled')::int AS cancelled "
        "FROM job_runs WHERE job_name = 'cancel-stale-order') batches"
    )
    cancelled_since_start = db.scalar(
        "SELECT count(*) FROM orders_order WHERE status = 'cancelled' AND cancel_reason = 'not accepted in time' "
        "AND cancelled_at >= %s",
        [START],
    )
    safety_net = db.scalar(
        "SELECT coalesce(sum((result->>'cancelled')::int), 0) FROM job_runs WHERE job_name = 'cancel-stale-orders'"
    )
    assert changed + safety_net == cancelled_since_start


def _traffic_counts(log: str) -> dict[str, int]:
    """Parse "order traffic: 600 placed, 480 accepted, ..." from the driver's output."""
    line = next(line for line in log.splitlines() if line.startswith("order traffic:"))
    return {name: int(n) for n, name in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", line.split(":", 1)[1])}
