"""The scenarios' waits follow the system's progress: a busy machine gets as long as the
work keeps moving, and a stuck system fails a stall's length after its last step, not
after a fixed number of seconds (``support.processes.wait_while_progressing``)."""

from __future__ import annotations

import time

import pytest

from support.processes import SimulatedTime, wait_while_progressing
from tests.scenarios.harness import BOOT_STALL_SECONDS, HANG_GUARD_SECONDS, Scenario
from tests.scenarios.workloads import PROBE_SPEED, PROBE_START

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]


def test_a_wait_lasts_as_long_as_the_work_keeps_falling() -> None:
    left = [8]

    def one_step_per_look() -> int:
        time.sleep(0.3)  # each step takes well under the stall, all of them together more
        left[0] -= 1
        return left[0]

    started = time.monotonic()
    wait_while_progressing(one_step_per_look, stall=1.0, interval=0.05, what="steps")
    assert left[0] == 0 and time.monotonic() - started > 1.0


def test_a_wait_fails_a_stall_after_the_last_step() -> None:
    left = iter([5, 4, 3])

    def stuck_at_three() -> int:
        return next(left, 3)

    started = time.monotonic()
    with pytest.raises(TimeoutError, match="steps: 3 left, and no progress for 1 s"):
        wait_while_progressing(stuck_at_three, stall=1.0, interval=0.05, what="steps")
    assert 1.0 < time.monotonic() - started < 10


def test_runs_nobody_executes_fail_the_drain_a_stall_after_they_were_claimed(scenario: Scenario) -> None:
    """Schedulers claim and hand out probe ticks, and no worker is running: the drain
    sees nothing finish and fails after its stall, however many runs are left."""
    scenario.fleet.environment["SCHEDULER_EXTRA_JOB_MODULES"] = "tests.scenarios.jobs.probes"
    clock = SimulatedTime.starting(PROBE_START, speed=PROBE_SPEED, lead=3.0)
    scenario.start_schedulers(clock, 1)
    handed_out = "SELECT CASE WHEN EXISTS (SELECT 1 FROM job_runs WHERE status = 'enqueued') THEN 0 ELSE 1 END"
    scenario.wait_until_none(handed_out, stall=BOOT_STALL_SECONDS, what="a run handed out")
    scenario.stop("scheduler")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"runs finishing: [1-9][0-9]* left, and no progress for 3 s"):
        scenario.wait_until_idle(stall=3.0)
    assert time.monotonic() - started < 3.0 + 10


def test_a_wait_for_a_run_fails_a_stall_after_the_schedulers_last_pass(scenario: Scenario) -> None:
    """No scheduler makes a pass, so nothing claims the run: the wait fails after its stall."""
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"a succeeded run of weekly-payouts: .* no progress for 1 s"):
        scenario.wait_for_run("weekly-payouts", "succeeded", stall=1.0)
    assert time.monotonic() - started < 1.0 + 10
