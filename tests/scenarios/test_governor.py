"""``simulate`` on a clock its workers cannot keep up with (issue #35): the governor slows
the clock, no task waiting for a worker is delivered again, and a run stopped before it
settled still prints its report, saying why.

The slow worker is artificial (``TIFFIN_SIMULATE_SLOW_PROBE_MS``: every sim-probe run
takes that many more real milliseconds), so the clock outruns the workers on any machine:
at 600x a probe tick comes every 0.1 real seconds and two workers take 0.4 s over each.
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from simulation.probe_jobs import SLOW_PROBE_VARIABLE
from simulation.services import PROBE_JOB
from support.processes import wait_for
from tests.scenarios.harness import BOOT_STALL_SECONDS, HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)
SPEED = 600


def test_a_clock_the_workers_cannot_keep_up_with_is_slowed_and_no_waiting_task_is_delivered_again(
    scenario: Scenario, tmp_path: Path
) -> None:
    scenario.seed(restaurants=2, weeks=1, now=START)
    done = scenario.manage(
        "simulate", "--start", START.isoformat(), "--duration", "40m", "--speed", str(SPEED),
        "--servers", "1", "--workers", "2", "--orders-per-minute", "0", "--json", "--log-dir", str(tmp_path),
        env={SLOW_PROBE_VARIABLE: "400", "Q_SAVE_LIMIT": "0"},  # every task's attempts kept, for the check below
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["ok"] is True and report["unsettled"] == ""
    clock = report["clock"]
    assert clock["asked_speed"] == SPEED
    # The governor saw the probe tasks waiting and slowed the clock, by halves.
    assert clock["changes"] and clock["slowest_speed"] <= SPEED / 2, clock
    assert clock["max_lag_seconds"] > 120 and clock["effective_speed"] < SPEED, clock
    assert "clock slowed to" in done.stderr
    db = scenario.db
    # No task was delivered twice: django-q2 counts a second delivery of one task in its
    # attempt_count, and the scheduler's requeue (a second task for the same run) did not
    # come while the first one was still waiting for a worker.
    assert db.scalar("SELECT max(attempt_count) FROM django_q_task") == 1
    assert db.scalar("SELECT count(*) FROM job_run_events WHERE kind = 'requeued'") == 0
    assert db.scalar("SELECT count(*) FROM django_q_ormq") == 0
    # The slowed clock still ran every tick once.
    probe = next(job for job in report["jobs"] if job["job_name"] == "sim-probe")
    assert probe["never_claimed"] == 0 and probe["broken"] == [], probe


def test_a_run_stopped_before_it_settled_still_prints_its_report_with_the_reason(
    scenario: Scenario, tmp_path: Path
) -> None:
    scenario.seed(restaurants=2, weeks=1, now=START)
    simulate = scenario.fleet.start(
        "simulate",
        ["simulate", "--start", START.isoformat(), "--duration", "3h", "--speed", "60", "--servers", "1",
         "--orders-per-minute", "0", "--log-dir", str(tmp_path / "logs")],
        env={SLOW_PROBE_VARIABLE: "200"},
        may_finish=True,
    )  # fmt: skip

    def running() -> bool:
        return "started 1 servers" in simulate.log_path.read_text(errors="replace")

    wait_for(running, timeout=120, what="the simulation starting its servers")
    # The servers' boot is one long step; then each scheduler pass and each event of a probe run is one.
    scenario.wait_for_run(PROBE_JOB, "succeeded", stall=BOOT_STALL_SECONDS)
    simulate.send(signal.SIGTERM)  # as a supervisor or `timeout` stops it
    assert simulate.popen is not None
    try:
        code = simulate.popen.wait(timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail(f"simulate did not stop after SIGTERM: {simulate.log_tail()}")
    log = simulate.log_path.read_text(errors="replace")
    assert code == 128 + signal.SIGTERM, log[-3000:]  # as a SIGTERM asks, once the report is out
    assert "Did not settle: stopped at" in log and "by exit 143" in log, log[-3000:]
    assert "INVARIANTS BROKEN:" in log and "did not settle: stopped at" in log
    assert "Clock: " in log  # the speed the run went at, up to the stop
    # Nothing it started outlived it (its database's connections only: other runs share the server).
    started = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name ~ '^(worker|sched)'"
    )
    wait_for(
        lambda: scenario.db.scalar(started) == 0,
        timeout=15,
        what="the simulation's processes closing their connections",
    )
