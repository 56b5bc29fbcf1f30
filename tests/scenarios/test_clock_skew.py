"""Scenario 7, clock skew: servers that disagree about the time.

Eight schedulers whose clocks are spread from 90 seconds slow to 90 seconds fast. A
lock keyed on "this minute by my clock", or a lease that expires by the holder's clock,
lets two of them run the same tick; a claim keyed on the logical tick does not.
"""

from __future__ import annotations

import pytest

from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from tests.scenarios.workloads import assert_every_tick_ran_once, run_probe_fleet

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

MAX_SKEW = 90.0
SKEWS = [-MAX_SKEW + i * (2 * MAX_SKEW / 7) for i in range(8)]  # -90 ... +90 seconds


def test_schedulers_up_to_90_seconds_apart_still_run_each_tick_exactly_once(scenario: Scenario) -> None:
    run_probe_fleet(scenario, schedulers=8, skews=SKEWS)
    assert_every_tick_ran_once(scenario, schedulers=8)
    # A fast clock may claim a tick early, never more than its skew early: skew can move
    # when a tick runs, never how often. (How early depends on the machine's load, so
    # only the bound is asserted.)
    earliest = scenario.db.scalar("SELECT min(extract(epoch FROM created_at - scheduled_for)) FROM job_runs")
    assert float(earliest) >= -MAX_SKEW - 1
