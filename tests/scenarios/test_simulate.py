"""``manage.py simulate`` end to end: with every fault it reports no duplicates and no
unexplained misses and exits 0; with an invariant broken on purpose it exits 1; and the
demo's path (SQLite, a crash) holds too."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from simulation.probe_jobs import BREAK_VARIABLE
from simulation.runner import TARGET_JOB
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from tests.scenarios.workloads import assert_runs_settled

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_simulate_with_every_fault_keeps_every_invariant_and_exits_0(scenario: Scenario, tmp_path: Path) -> None:
    scenario.seed(restaurants=9, weeks=3, now=START)
    done = scenario.manage(
        "simulate", "--start", START.isoformat(), "--duration", "90m", "--servers", "3",
        "--crash-worker", "--pause-worker", "--kill-scheduler", "--skew", "90",
        "--json", "--log-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(done)
    assert report["ok"] is True and report["problems"] == []
    assert report["duplicate_claims"] == 0 and report["duplicate_charges"] == 0
    assert all(job["never_claimed"] == 0 and job["broken"] == [] for job in report["jobs"])
    faults = report["faults"]
    assert [line.split()[0] for line in faults] == ["kill-scheduler", "crash-worker", "pause-worker"]
    # Every settlement the crash or the pause hit was finished, once.
    stories = list(zip(faults, report["fault_stories"], strict=True))
    hits = [(line, story) for line, story in stories if story.startswith(f"{TARGET_JOB} ")]
    assert all("-> succeeded" in story for _, story in hits), hits
    # A paused worker holding a run wakes only after a scheduler took that run (however
    # late a loaded machine's pass saw the heartbeat stale), and the simulation goes on
    # once its late word was written: the run was abandoned, and the word refused.
    [(paused, paused_story)] = [(line, story) for line, story in stories if line.startswith("pause-worker")]
    if "until its run was taken from it" in paused:
        assert "-> abandoned ->" in paused_story, paused_story
        assert report["recovery"]["fence_or_finish_rejected"] >= 1
    else:
        assert "no run in flight" in paused, paused
    assert report["payouts"]["checked"] >= 9 and report["payouts"]["unpaid_weeks"] == 0
    # The report's own counts, checked once more straight from the database.
    db = scenario.db
    assert db.scalar("SELECT count(*) FROM (SELECT 1 FROM simulation_probe_charges "
                     "GROUP BY job_name, scheduled_for HAVING count(*) > 1) dup") == 0  # fmt: skip
    assert_runs_settled(db)


def test_simulate_exits_1_when_a_tick_is_charged_twice(scenario: Scenario, tmp_path: Path) -> None:
    scenario.seed(restaurants=3, weeks=1, now=START)
    done = scenario.manage(
        "simulate", "--start", START.isoformat(), "--duration", "10m", "--servers", "2",
        "--orders-per-minute", "0", "--json", "--log-dir", str(tmp_path),
        env={BREAK_VARIABLE: "duplicate-charge"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    report = _report(done)
    assert report["ok"] is False
    # Every sim-probe tick that ran was charged twice, and the report counted each second
    # charge. How many ticks ran in the window depends on how fast this machine is; the
    # runs' own records say which did.
    db = scenario.db
    ran = db.scalar("SELECT count(*) FROM job_runs WHERE job_name = 'sim-probe' AND status = 'succeeded'")
    per_tick = db.counts(
        "SELECT n, count(*) FROM (SELECT count(*) AS n FROM simulation_probe_charges "
        "WHERE job_name = 'sim-probe' GROUP BY scheduled_for) ticks GROUP BY n"
    )
    assert ran > 0 and per_tick == {2: ran} and report["duplicate_charges"] == ran
    assert any("duplicate probe charges" in problem for problem in report["problems"])
    assert "invariants broke" in done.stderr


def test_the_demo_path_on_sqlite_with_a_crash_exits_0(scenario: Scenario, tmp_path: Path) -> None:
    sqlite = {"DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"}
    for command in (["migrate", "--verbosity", "0"], ["seed_demo", "--restaurants", "6", "--now", START.isoformat()]):
        prepared = scenario.manage(*command, env=sqlite)
        assert prepared.returncode == 0, prepared.stderr
    # make demo's faults in half its time: the crash hits the payout run itself (one
    # restaurant per transaction keeps it running), which its lease gives back. A crash of
    # another job's run at the payout tick could take the payout's task down with its
    # cluster, and django-q2 hands a taken task out again only after its lock expires.
    done = scenario.manage(
        "simulate", "--start", START.isoformat(), "--duration", "60m", "--servers", "3",
        "--crash-worker", "30m", "--fault-job", "weekly-payouts", "--kill-sender", "30m",
        "--log-dir", str(tmp_path / "demo-logs"), env={**sqlite, "PAYOUT_BATCH_SIZE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Every invariant held: exit 0." in done.stdout
    assert "fault: crash-worker" in done.stdout and "what became of it:" in done.stdout
    assert (tmp_path / "demo.sqlite3").exists()
    assert (tmp_path / "demo-logs" / "provider.log").exists()  # made by the run, as make demo's db/demo-logs
    # The second crash landed inside the transfer sending, with requests in flight (its run
    # holds the job until its 600 s timeout: the hour leaves the next runs time to send).
    (killed,) = [line for line in done.stdout.splitlines() if "fault: kill-sender" in line]
    assert "SIGKILL mid-batch" in killed, killed
    # The provider's transfers beside the ledger: every paid week once, for every restaurant.
    with closing(sqlite3.connect(tmp_path / "demo.sqlite3")) as ledger:
        paid = dict(ledger.execute("SELECT restaurant_id, count(*) FROM payouts_payout WHERE net > 0 GROUP BY 1"))
    with closing(sqlite3.connect(tmp_path / "demo-logs" / "provider.sqlite3")) as provider:
        held = provider.execute("SELECT count(*), count(DISTINCT transfer_group) FROM transfers").fetchone()
    assert len(paid) == 6 and held == (sum(paid.values()), sum(paid.values()))
    assert f"Transfers at the provider (read through its API): {held[0]} for {held[0]} paid weeks; " in done.stdout
    assert "0 paid weeks without one, 0 paid twice, 0 of another amount, 0 unknown to the ledger" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("  ") and line.rstrip().endswith("  yes")]
    assert len(rows) == 6 and all(f"{paid[int(r)]:>8}" in row for r, row in zip(sorted(paid), rows, strict=True))
    assert "The ledger and the provider agree for every restaurant." in done.stdout
    statements = sum(1 for _ in (tmp_path / "demo-logs" / "mail").iterdir())
    assert statements >= 1 and "0 never sent" in done.stdout
