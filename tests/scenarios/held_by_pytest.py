"""Not part of the suite (pytest collects ``test_*.py`` only): ``test_pytest_sigterm``
runs this file in a pytest of its own and signals that pytest while the test below holds
a scheduler process on its scenario's database.

Once the scheduler has made a pass, the test writes the database's name and the
scheduler's pid to the file ``HELD_MARKER`` names, then waits for the scheduler to end,
which it never does by itself: only the session's end stops it (the harness's cleanup).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from support.processes import SimulatedTime, wait_for
from tests.scenarios.harness import BOOT_STALL_SECONDS, HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

PASSED = "SELECT count(*) FROM job_scheduler_nodes WHERE passes > 0"


def test_holds_a_scheduler_until_the_session_is_stopped(scenario: Scenario) -> None:
    clock = SimulatedTime.starting(datetime(2026, 3, 2, 12, 0, tzinfo=UTC), speed=1)
    scheduler = scenario.fleet.start("scheduler-0", ["run_scheduler"], env=clock.environment())
    wait_for(
        lambda: not scheduler.alive() or scenario.db.scalar(PASSED) > 0,
        timeout=BOOT_STALL_SECONDS,
        interval=0.1,
        what="the scheduler's first pass",
    )
    assert scheduler.alive(), scheduler.log_tail()
    marker = Path(os.environ["HELD_MARKER"])
    written = marker.with_suffix(".partial")
    written.write_text(json.dumps({"database": scenario.db.name, "scheduler": scheduler.pid}))
    written.rename(marker)  # whole or absent for the reader
    assert scheduler.popen is not None
    scheduler.popen.wait()
