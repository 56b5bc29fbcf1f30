"""Scenario 5, the tick that never happened: every server is down across several ticks,
the weekly payout tick among them.

Naive cron (or a timer that fires "every week from now") never runs the missed ticks
and nothing says so. Here ticks are computed from the schedules and job_runs: after the
restart each missed payout tick runs, late, paying exactly what it would have paid on
time; the deadline job records its missed ticks as skipped instead of running them; the
coalescing jobs run once; and ``check_runs`` reports every skip.

The outage is simulated by stopping every process (SIGKILL) and starting them again with
the shared clock eight days later.
"""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta

import pytest

from scheduling import cron
from support.processes import SimulatedTime
from tests.scenarios.harness import BOOT_STALL_SECONDS, HANG_GUARD_SECONDS, Scenario, unjustified_skips
from tests.scenarios.ledger import assert_ledger_correct, weeks_due

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

DOWN_AT = datetime(2027, 3, 7, 19, 10, tzinfo=UTC)  # Sunday, before the 20:30 payout tick
BACK_AT = datetime(2027, 3, 15, 9, 0, tzinfo=UTC)  # the next Monday morning
MISSED_PAYOUT_TICKS = [datetime(2027, 3, 7, 20, 30, tzinfo=UTC), datetime(2027, 3, 14, 20, 30, tzinfo=UTC)]
SPEED = 120.0
DEADLINE = timedelta(seconds=240)  # cancel-stale-orders' misfire deadline
# The steps before the outage: each scheduler's first pass, then a claimed tick.
BOOTING = (
    "SELECT greatest(2 - (SELECT count(*) FROM job_scheduler_nodes WHERE passes > 0), 0)"
    " + (SELECT CASE WHEN EXISTS (SELECT 1 FROM job_runs WHERE job_name = 'cancel-stale-orders') THEN 0 ELSE 1 END)"
)


def _run_fleet(scenario: Scenario, clock: SimulatedTime) -> None:
    scenario.start_workers(clock, 2, q_workers=2)
    scenario.start_schedulers(clock, 2)


def test_after_an_outage_payouts_catch_up_deadline_ticks_are_skipped_and_check_runs_reports_them(
    scenario: Scenario,
) -> None:
    db = scenario.db
    scenario.seed(restaurants=9, weeks=3, now=DOWN_AT - timedelta(minutes=10))
    # Every missed tick is recorded in one pass, however long the outage (send-transfers,
    # every minute, has about 11,000 in these eight days).
    scenario.fleet.environment["SCHEDULER_MAX_TICKS_PER_PASS"] = "20000"
    before = SimulatedTime.starting(DOWN_AT - timedelta(minutes=10), speed=SPEED, lead=4.0)
    _run_fleet(scenario, before)
    # The processes have the clock's lead plus ten simulated minutes (nine real seconds) to
    # boot, register the schedules and claim a tick; a loaded machine may need longer, and
    # an outage that began before then would leave nothing to catch up.
    scenario.wait_until_none(BOOTING, stall=BOOT_STALL_SECONDS, what="a claim before the outage")
    before.sleep_until(DOWN_AT)
    for process in scenario.fleet.processes.values():
        process.send(signal.SIGKILL)  # the outage: nothing stops cleanly
    scenario.fleet.stop_all()
    last_tick_before = db.scalar("SELECT max(scheduled_for) FROM job_runs WHERE job_name = 'cancel-stale-orders'")
    assert db.scalar("SELECT count(*) FROM payouts_payout") == 0

    after = SimulatedTime.starting(BACK_AT, speed=SPEED, lead=4.0)
    for process in scenario.fleet.processes.values():
        process.env.update(after.environment())
        scenario.fleet.restart(process.name)
    after.sleep_until(BACK_AT + timedelta(minutes=10))
    # Ten simulated minutes are five real seconds: a loaded machine may take longer than
    # that to boot the processes again, so wait for the catch-up itself, step by step.
    unpaid = "SELECT %s - count(*) FROM job_runs WHERE job_name = 'weekly-payouts' AND status = 'succeeded'"
    scenario.wait_until_none(unpaid, [len(MISSED_PAYOUT_TICKS)], stall=BOOT_STALL_SECONDS, what="the catch-up")
    scenario.stop("scheduler")
    scenario.wait_until_idle()
    scenario.stop("worker")

    _assert_payout_ticks_caught_up(scenario)
    _assert_deadline_ticks_skipped(scenario, after=last_tick_before)
    _assert_check_runs_reports_the_skips(scenario)


def _assert_payout_ticks_caught_up(scenario: Scenario) -> None:
    db = scenario.db
    runs = db.rows(
        "SELECT id, scheduled_for, status, started_at FROM job_runs WHERE job_name = 'weekly-payouts' ORDER BY 2"
    )
    assert [(scheduled_for, status) for _, scheduled_for, status, _ in runs] == [
        (tick, "succeeded") for tick in MISSED_PAYOUT_TICKS
    ]
    assert all(started_at > BACK_AT - timedelta(minutes=10) for *_, started_at in runs), "they ran after the outage"
    assert_ledger_correct(db, as_of=MISSED_PAYOUT_TICKS[-1])
    # Each late run paid exactly the weeks that were settled at its own tick.
    first_run = runs[0][0]
    for restaurant_id, zone, onboarded, week_start, run_id in db.rows(
        "SELECT r.id, r.timezone, r.onboarded_at, p.period_start, p.job_run_id "
        "FROM payouts_payout p JOIN orders_restaurant r ON r.id = p.restaurant_id"
    ):
        settled_at_first_tick = week_start in weeks_due(zone, onboarded, MISSED_PAYOUT_TICKS[0])
        assert (run_id == first_run) == settled_at_first_tick, (restaurant_id, week_start)


def _assert_deadline_ticks_skipped(scenario: Scenario, *, after: datetime) -> None:
    """Every tick since the outage began is recorded: skipped when it was claimed more
    than the deadline late, run otherwise."""
    db = scenario.db
    rows = db.rows(
        "SELECT id, scheduled_for, status, skip_reason, created_at FROM job_runs "
        "WHERE job_name = 'cancel-stale-orders' AND scheduled_for > %s ORDER BY 2",
        [after],
    )
    last_pass = db.scalar("SELECT max(last_pass_at) FROM job_scheduler_nodes")
    assert [row[1] for row in rows] == cron.ticks_between("*/5 * * * *", "UTC", after, last_pass)
    # A tick claimed in time runs, unless the previous run was still going (how long a run
    # takes depends on the machine): the job forbids overlap, and such a skip must name
    # the run it waited behind (``unjustified_skips``).
    unjustified = {run_id for run_id, reason in unjustified_skips(db, "cancel-stale-orders") if reason == "overlap"}
    for run_id, tick, status, reason, claimed_at in rows:
        if claimed_at - tick > DEADLINE:
            assert (status, reason) == ("skipped", "missed_deadline"), tick
        else:
            assert (status, reason) in {("succeeded", ""), ("skipped", "overlap")}, tick
            assert run_id not in unjustified, (tick, "skipped for overlap with no run going")
    assert sum(reason == "missed_deadline" for *_, reason, _ in rows) > 2000
    # The coalescing jobs ran once for the whole outage and recorded the rest. The outage's
    # ticks are those due at the first claim after the restart: when the processes took
    # longer to boot than the clock's lead, that pass already saw BACK_AT's own tick.
    for job_name in ("clean-carts", "check-missed-runs"):
        first_claim = db.scalar(
            "SELECT min(created_at) FROM job_runs WHERE job_name = %s AND scheduled_for > %s", [job_name, after]
        )
        outcome = db.counts(
            "SELECT status || ':' || skip_reason, count(*) FROM job_runs WHERE job_name = %s "
            "AND scheduled_for > %s AND scheduled_for <= %s GROUP BY 1",
            [job_name, after, first_claim],
        )
        assert outcome.get("succeeded:") == 1 and outcome.get("skipped:coalesced", 0) >= 6, (job_name, outcome)


def _assert_check_runs_reports_the_skips(scenario: Scenario) -> None:
    # As of the schedulers' last pass: later ticks were never claimed because nothing ran.
    last_pass = scenario.db.scalar("SELECT max(last_pass_at) FROM job_scheduler_nodes")
    # The command's clock stands there too (it refuses a --now in its future).
    clock = SimulatedTime.starting(last_pass, speed=1.0)
    done = scenario.manage("check_runs", "--json", "--now", last_pass.isoformat(), clock=clock)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    kinds = {(problem["kind"], problem["job"]) for problem in report["problems"]}
    assert ("skipped", "cancel-stale-orders") in kinds
    assert ("skipped", "check-missed-runs") in kinds
    assert not {kind for kind, _ in kinds} - {"skipped"}, "only skips: nothing unclaimed, stuck or dead"
    window_start = datetime.fromisoformat(report["window"]["start"])
    reported = {
        datetime.fromisoformat(problem["scheduled_for"])
        for problem in report["problems"]
        if problem["job"] == "cancel-stale-orders"
    }
    skipped = dict(
        scenario.db.rows(
            "SELECT scheduled_for, skip_reason FROM job_runs WHERE job_name = 'cancel-stale-orders' "
            "AND status = 'skipped' AND scheduled_for > %s",
            [window_start],
        )
    )
    assert reported == set(skipped), "check_runs lists every skip in its window"
    assert sum(reason == "missed_deadline" for reason in skipped.values()) > 200
    deadline_problems = [
        problem
        for problem in report["problems"]
        if problem["job"] == "cancel-stale-orders"
        and skipped[datetime.fromisoformat(problem["scheduled_for"])] == "missed_deadline"
    ]
    assert all("misfire deadline" in problem["detail"] for problem in deadline_problems)
