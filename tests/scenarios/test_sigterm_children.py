"""SIGTERM to ``manage.py simulate`` or to the chaos table (``make chaos`` stopped by a
supervisor, a CI timeout or ``kill``) stops every process they started, as Ctrl-C does.

Each runs in a session of its own on the scenario's database. Once a probe job has run
(the servers are up, django-q2 workers forked), the test notes every process group at
or below it, sends SIGTERM to the command alone and requires that it exits by it
(status 143, not killed by the signal) with no process of those groups left.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import PROJECT_DIR, group_members, groups_below, stop_tree, wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

COMMANDS = {
    "simulate": [
        *(str(PROJECT_DIR / "manage.py"), "simulate", "--reset", "--duration", "1h", "--speed", "60"),
        *("--servers", "1", "--orders-per-minute", "0"),
    ],
    "chaos-table": ["-m", "simulation.chaos_table", "--seeds", "1", "--duration", "1h", "--servers", "2"],
}
PROBE_RAN = "SELECT count(*) FROM job_runs WHERE job_name = 'sim-probe' AND status = 'succeeded'"


@pytest.mark.parametrize("command", COMMANDS)
def test_sigterm_stops_every_process_it_started(scenario: Scenario, tmp_path: Path, command: str) -> None:
    argv = [sys.executable, *COMMANDS[command], "--log-dir", str(tmp_path / "logs")]
    out = (tmp_path / "out.log").open("wb")
    top = subprocess.Popen(
        argv, cwd=PROJECT_DIR, env=scenario.fleet.environment, stdout=out, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    groups: set[int] = set()
    try:
        wait_for(
            lambda: top.poll() is not None or scenario.db.scalar(PROBE_RAN) > 0,
            timeout=120,
            interval=0.25,
            what=f"a probe run under {command}",
        )
        assert top.poll() is None, (tmp_path / "out.log").read_text()[-3000:]
        groups = groups_below(top.pid)
        assert len(groups) >= 3, "the command's own group, a worker's and a scheduler's at least"
        top.send_signal(signal.SIGTERM)
        top.wait(timeout=90)
        wait_for(lambda: not any(map(group_members, groups)), timeout=10, what="every group gone")
        assert top.returncode == 128 + signal.SIGTERM, (tmp_path / "out.log").read_text()[-3000:]
    finally:
        out.close()
        stop_tree(top, groups, grace=5)
