"""Workloads that several scenarios run the same way (three charges, clock skew, pooler)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from simulation.processes import SimulatedTime
from tests.scenarios.harness import (
    Scenario,
    charges_per_tick,
    claimed_cron_ticks,
    expected_cron_ticks,
    succeeded_ticks,
)

PROBES = ("probe-every-minute", "probe-every-2-minutes", "probe-every-5-minutes")
PROBE_START = datetime(2027, 3, 7, 19, 0, tzinfo=UTC)  # a Sunday, before the weekly payout tick
PROBE_SPEED = 240.0  # four simulated minutes per real second
PROBE_MINUTES = 130  # ticks of the probes alone: 130 + 65 + 26


def run_probe_fleet(scenario: Scenario, *, schedulers: int, skews: Sequence[float] = ()) -> SimulatedTime:
    """Two workers and ``schedulers`` scheduler processes for PROBE_MINUTES simulated
    minutes; then the schedulers stop, the claimed runs drain and the workers stop."""
    scenario.fleet.environment["SCHEDULING_EXTRA_JOB_MODULES"] = "tests.scenarios.jobs.probes"
    clock = SimulatedTime.starting(PROBE_START, speed=PROBE_SPEED, lead=3.0)
    scenario.start_workers(clock, 2, q_workers=2)
    scenario.start_schedulers(clock, schedulers, skews=skews)
    clock.sleep_until(clock.after(minutes=PROBE_MINUTES))
    scenario.stop("scheduler")
    scenario.wait_until_idle(timeout=30)
    scenario.stop("worker")
    assert not scenario.fleet.crashed(), "a process exited on its own"
    return clock


def assert_every_tick_ran_once(scenario: Scenario, *, schedulers: int) -> None:
    """Every cron tick due while the schedulers ran has exactly one claim row; each run
    succeeded with exactly one execution and one charge, except ticks a policy skips on
    purpose (coalesce and forbid, when the machine lags), which have no charge."""
    db = scenario.db
    expected, claimed = expected_cron_ticks(db), claimed_cron_ticks(db)
    assert sum(len(expected[job]) for job in PROBES) >= 200
    for job_name, ticks in expected.items():
        assert claimed.get(job_name, []) == ticks, f"{job_name}: claimed ticks differ from the schedule's"
    outcomes = db.counts("SELECT status || ':' || skip_reason, count(*) FROM job_runs GROUP BY 1")
    assert set(outcomes) <= {"succeeded:", "skipped:coalesced", "skipped:overlap"}, outcomes
    for job_name in PROBES:
        succeeded = succeeded_ticks(db, job_name)
        assert job_name == "probe-every-minute" or len(succeeded) >= 0.9 * len(expected[job_name])
        charges = charges_per_tick(db, job_name)
        assert set(charges) == set(succeeded), f"{job_name}: a run that succeeded never charged"
        assert set(charges.values()) == {1}, f"{job_name}: a tick was charged more than once"
    # Allow and catch up: nothing may be skipped.
    assert succeeded_ticks(db, "probe-every-minute") == expected["probe-every-minute"]
    starts = db.scalar("SELECT count(*) FROM job_run_events WHERE kind = 'started'")
    assert starts == outcomes["succeeded:"], "a run was started more than once"
    assert db.scalar("SELECT count(*) FROM job_scheduler_nodes WHERE passes > 0") == schedulers
