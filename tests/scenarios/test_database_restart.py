"""Scenario 6, database restart: PostgreSQL restarts (a failover, a crash, a minor
upgrade) while a payout run is in the middle of its write.

Naive code that commits as it goes leaves half a week paid, and a retry that does not
know what was written pays the rest twice or not at all. Here each batch of payouts is
one transaction with its fence check, so the restart rolls the batch back whole; the
workers and schedulers reconnect, the run is retried, and the ledger ends up exactly
right, with no process restarted by hand.

This is the only scenario that restarts the server (others' tests on it would notice):
it pins the worker inside its write with a lock, restarts, and waits for the server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.scenarios.harness import PostgresServer, Scenario
from tests.scenarios.ledger import assert_ledger_correct

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(180)]

START = datetime(2027, 3, 7, 20, 25, tzinfo=UTC)
TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
SPEED = 120.0


def restart_postgres(server: PostgresServer) -> None:
    """Restart the local cluster (fast mode: every connection is cut) and wait for it."""
    clusters = sorted(Path("/etc/postgresql").glob("*/main")) if Path("/etc/postgresql").exists() else []
    if not shutil.which("pg_ctlcluster") or not clusters or server.host not in {"127.0.0.1", "localhost"}:
        message = "restarting PostgreSQL needs the local Debian cluster (pg_ctlcluster)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    version = clusters[-1].parent.name
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "--mode", "fast"],
        check=True,
        timeout=60,
        capture_output=True,
    )
    server.wait_ready(timeout=60)


def test_a_database_restart_mid_write_leaves_no_partial_payout_and_the_run_is_retried(scenario: Scenario) -> None:
    db = scenario.db
    with scenario.payout_run_pinned("LOCK TABLE payouts_payout IN SHARE MODE", start=START, speed=SPEED) as pinned:
        run_id, interrupted_fence = pinned.run_id, pinned.fence
        restart_postgres(db.server)

    scenario.wait_for_run("weekly-payouts", "succeeded", timeout=90)
    scenario.stop("scheduler")
    scenario.stop("worker")

    assert scenario.fleet.crashed() == [], "every process rode out the restart"
    attempts, fence = db.rows("SELECT attempts, fence FROM job_runs WHERE id = %s", [run_id])[0]
    assert attempts >= 2 and fence > interrupted_fence
    assert_ledger_correct(db, as_of=TICK)
    # The interrupted batch left nothing: every payout is the final attempt's.
    assert db.rows("SELECT DISTINCT job_run_id, fence FROM payouts_payout") == [(run_id, fence)]
