"""``make up`` after ``make demo`` is calm: the demo's steps (seed, then a short
``simulate`` on last Sunday's evening), then what ``make up`` does before it serves
(``end_simulation``) and one scheduler pass at the real present. No alert is raised,
``check_runs`` exits 0, and no job that no code declares keeps a schedule that would
show a next fire time. Then the worker ``make up`` starts runs for a few scheduler passes:
it cancels no demo order and starts no run of the simulated past."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from support.processes import wait_while_progressing
from tests.scenarios.harness import BOOT_STALL_SECONDS, HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]


def _last_sunday_evening() -> datetime:
    """The demo's start, as the Makefile computes it: 20:00 UTC on the Sunday before today."""
    today = datetime.now(UTC)
    return (today - timedelta(days=today.weekday() + 1)).replace(hour=20, minute=0, second=0, microsecond=0)


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def test_after_the_demo_a_pass_at_the_real_present_raises_no_alert(scenario: Scenario) -> None:
    start = _last_sunday_evening().isoformat()
    _ok(scenario.manage("seed_demo", "--reset", "--now", start, "--restaurants", "4", "--weeks", "2"))
    simulated = scenario.manage(
        *("simulate", "--reset", "--start", start, "--duration", "40m", "--speed", "120"),
        *("--servers", "2", "--workers", "1", "--orders-per-minute", "2"),
    )
    _ok(simulated)
    assert scenario.db.scalar("SELECT count(*) FROM job_schedules WHERE job_name LIKE 'sim-%%'") == 2
    _ok(scenario.manage("run_job", "clean-carts", "--sync"))  # the nightly clean-up, as make demo runs it

    cancelled_by_the_demo = _cancelled_orders(scenario)
    handed_over = scenario.manage("end_simulation")
    _ok(handed_over)
    assert handed_over.stdout.startswith("The simulated history ends at ")
    handed_over_at = scenario.db.scalar("SELECT max(first_seen_at) FROM job_schedules")
    assert _runs_in_flight(scenario) == 0, "every run the simulation left unfinished is retired"
    _ok(scenario.manage("tick"))
    checked = scenario.manage("check_runs", "--alert")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("OK: no problems")
    alerts = scenario.db.rows("SELECT job_name, scheduled_for, kind, detail, resolved_at FROM job_run_alerts")
    assert alerts == [], alerts

    # What a deployed process declares (this test process's registry also holds the jobs
    # other tests declared).
    listed = scenario.manage("list_jobs", "--json")
    _ok(listed)
    declared = {job["name"] for job in json.loads(listed.stdout)}
    stored = {name for (name,) in scenario.db.rows("SELECT job_name FROM job_schedules")}
    assert stored == declared, "only the jobs the code declares keep a schedule"
    # The demo did its work: the Sunday payout tick paid the week that had ended.
    assert (
        scenario.db.scalar("SELECT count(*) FROM job_runs WHERE job_name = 'weekly-payouts' AND status = 'succeeded'")
        == 1
    )
    assert (
        scenario.db.scalar("SELECT count(*) FROM job_runs WHERE job_name = 'clean-carts' AND status = 'succeeded'") == 1
    )

    # make up's worker (its scheduler loop and cluster) for a few passes at the real present.
    scenario.fleet.start("up-worker", ["worker"])
    # Booting is one long step; then each pass is one.
    wait_while_progressing(
        lambda: max(5 - _passes(scenario), 0),
        stall=BOOT_STALL_SECONDS,
        what="five scheduler passes of make up's worker",
    )
    # The safety net too, which make up's worker runs every five minutes.
    _ok(scenario.manage("run_job", "cancel-stale-orders", "--sync"))
    assert _cancelled_orders(scenario) == cancelled_by_the_demo, "make up cancels no demo order"
    started_late = scenario.db.rows(
        "SELECT job_name, subject, scheduled_for, trigger, status, started_at FROM job_runs "
        "WHERE trigger <> 'manual' AND scheduled_for < %s AND started_at > %s",
        [handed_over_at, handed_over_at],
    )
    assert started_late == [], "no run of the simulated past starts at the real present"


def _cancelled_orders(scenario: Scenario) -> set[int]:
    return {order_id for (order_id,) in scenario.db.rows("SELECT id FROM orders_order WHERE status = 'cancelled'")}


def _runs_in_flight(scenario: Scenario) -> int:
    statuses = ["scheduled", "enqueued", "running", "failed", "abandoned"]
    return int(scenario.db.scalar("SELECT count(*) FROM job_runs WHERE status = ANY(%s)", [statuses]))


def _passes(scenario: Scenario) -> int:
    return int(scenario.db.scalar("SELECT coalesce(max(passes), 0) FROM job_scheduler_nodes"))
