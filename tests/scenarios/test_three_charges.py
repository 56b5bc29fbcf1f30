"""Scenario 1, the three-charges bug: every server runs the same cron line.

Eight scheduler processes and two worker processes share one PostgreSQL database and
one accelerated clock. Naive cron would charge eight times per tick; here each tick is
one claim row and one execution.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from simulation.processes import SimulatedTime
from tests.scenarios.harness import Scenario, charges_per_tick, claimed_cron_ticks, expected_cron_ticks

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(240)]

START = datetime(2027, 3, 7, 19, 0, tzinfo=UTC)  # a Sunday, before the weekly payout tick
SPEED = 240.0  # four simulated minutes per real second
PROBES = ("probe-every-minute", "probe-every-2-minutes", "probe-every-5-minutes")


def test_eight_schedulers_claim_and_execute_each_tick_exactly_once(scenario: Scenario) -> None:
    scenario.fleet.environment["SCHEDULING_EXTRA_JOB_MODULES"] = "tests.scenarios.jobs.probes"
    clock = SimulatedTime.starting(START, speed=SPEED, lead=3.0)
    scenario.start_workers(clock, 2, q_workers=2)
    scenario.start_schedulers(clock, 8)
    clock.sleep_until(clock.after(minutes=130))
    scenario.stop("scheduler")
    scenario.wait_until_idle(timeout=30)
    scenario.stop("worker")

    db = scenario.db
    expected, claimed = expected_cron_ticks(db), claimed_cron_ticks(db)
    assert sum(len(expected[job]) for job in PROBES) >= 200
    for job_name, ticks in expected.items():
        assert claimed.get(job_name, []) == ticks, f"{job_name}: claimed ticks differ from the schedule's"
    for job_name in PROBES:
        charges = charges_per_tick(db, job_name)
        assert set(charges) == set(expected[job_name]), f"{job_name}: a tick was never charged"
        assert set(charges.values()) == {1}, f"{job_name}: a tick was charged more than once"
    statuses = db.counts("SELECT status, count(*) FROM job_runs GROUP BY status")
    assert statuses == {"succeeded": sum(len(ticks) for ticks in expected.values())}
    # Every scheduler took part: the claims were contested, not served by one lucky process.
    assert db.scalar("SELECT count(*) FROM job_scheduler_nodes WHERE passes > 0") == 8
    assert db.scalar("SELECT count(*) FROM job_run_events WHERE kind = 'started'") == sum(statuses.values())
