"""SIGTERM stops ``manage.py worker`` at any moment of its start, as it does once it runs.

django-q2's ``Cluster`` takes SIGTERM and SIGINT for itself when it is made. A signal that
arrived while the cluster was starting stopped the cluster and was spent there: the
worker went on to run its scheduler loop with no cluster under it, claiming runs nothing
would execute, until its supervisor killed it (``make up``'s Ctrl-C waited forever on a
loaded CI machine). Each case starts a worker in a session of its own, sends SIGTERM the
moment its log shows a step of the start, and requires a clean exit (status 0) with no
process of its group left.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from support.processes import PROJECT_DIR, group_members, signal_group, wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

# Lines of the worker's log, in the order its start writes them.
STEPS = {
    "cluster starting": "starting.",  # the sentinel forked, the cluster not yet up
    "cluster running": "running.",
    "scheduler started": "scheduling.loop scheduler",
}
# A clean stop takes about a second; the bound is for a loaded machine, far below the hang.
STOP_SECONDS = 60


@pytest.mark.parametrize("step", STEPS)
def test_sigterm_at_each_step_of_the_start_stops_the_worker_and_its_cluster(scenario: Scenario, step: str) -> None:
    worker = subprocess.Popen(
        [sys.executable, str(PROJECT_DIR / "manage.py"), "worker"],
        cwd=PROJECT_DIR, env=scenario.fleet.environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True, text=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert worker.stdout is not None
        for line in worker.stdout:
            seen.append(line)
            if STEPS[step] in line:
                worker.send_signal(signal.SIGTERM)
                break
        else:
            pytest.fail(f"the worker ended before {step!r}:\n{''.join(seen)[-3000:]}")
        try:
            rest, _ = worker.communicate(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGTERM at {step!r}: the worker still runs after {STOP_SECONDS} s:\n{''.join(seen)[-3000:]}")
        log = "".join(seen) + rest
        assert worker.returncode == 0, log[-3000:]
        assert "scheduling.loop" not in log or "stopped after" in log, log[-3000:]
        wait_for(lambda: not group_members(worker.pid), timeout=STOP_SECONDS, what="the worker's group to be gone")
    finally:
        signal_group(worker.pid, signal.SIGKILL)  # what outlived the test, if anything
        worker.wait(timeout=30)
