"""Scenario 1, the three-charges bug: every server runs the same cron line.

Eight scheduler processes and two worker processes share one PostgreSQL database and
one accelerated clock. Naive cron would charge eight times per tick; here each tick is
one claim row, one execution and one charge.
"""

from __future__ import annotations

import pytest

from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from tests.scenarios.workloads import assert_every_tick_ran_once, run_probe_fleet

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]


def test_eight_schedulers_claim_and_execute_each_tick_exactly_once(scenario: Scenario) -> None:
    run_probe_fleet(scenario, schedulers=8)
    assert_every_tick_ran_once(scenario, schedulers=8)
