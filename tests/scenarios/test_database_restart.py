"""Scenario 6, database restart: PostgreSQL restarts (a failover, a crash, a minor
upgrade) while a payout run is in the middle of its write.

Naive code that commits as it goes leaves half a week paid, and a retry that does not
know what was written pays the rest twice or not at all. Here each batch of payouts is
one transaction with its fence check, so the restart rolls the batch back whole; the
workers and schedulers reconnect, the run is retried, and the ledger ends up exactly
right, with no process restarted by hand.

It runs on a PostgreSQL server of its own (``tests/scenarios/cluster.py``: a throwaway
cluster from ``initdb`` on a free port), because restarting the machine's server would
cut every other database's connections: it pins the worker inside its write with a lock,
restarts that private server, and waits for it. The shared server is only watched: a
connection held on it before the scenario is still the same backend afterwards.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.scenarios.cluster import PrivateScenario, ThrowawayCluster
from tests.scenarios.harness import HANG_GUARD_SECONDS, PostgresServer, Scenario
from tests.scenarios.ledger import assert_ledger_correct

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 7, 20, 25, tzinfo=UTC)
TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
SPEED = 120.0
BACKEND = "SELECT pg_backend_pid(), pg_postmaster_start_time()"


def test_a_database_restart_mid_write_leaves_no_partial_payout_and_the_run_is_retried(
    private_scenario: PrivateScenario, pg_server: PostgresServer
) -> None:
    scenario, cluster = private_scenario.scenario, private_scenario.cluster
    db = scenario.db
    assert db.server.port != pg_server.port
    with pg_server.connect() as bystander:
        before = bystander.execute(BACKEND).fetchone()
        _restart_mid_write(scenario, cluster)
        # The machine's server was not restarted: the same connection, the same postmaster.
        assert bystander.execute(BACKEND).fetchone() == before


def _restart_mid_write(scenario: Scenario, cluster: ThrowawayCluster) -> None:
    db = scenario.db
    with scenario.payout_run_pinned("LOCK TABLE payouts_payout IN SHARE MODE", start=START, speed=SPEED) as pinned:
        run_id, interrupted_fence = pinned.run_id, pinned.fence
        cluster.restart()

    scenario.wait_run_reaches(run_id, "succeeded")
    scenario.stop("scheduler")
    scenario.stop("worker")

    assert scenario.fleet.crashed() == [], "every process rode out the restart"
    attempts, fence = db.rows("SELECT attempts, fence FROM job_runs WHERE id = %s", [run_id])[0]
    assert attempts >= 2 and fence > interrupted_fence
    assert_ledger_correct(db, as_of=TICK)
    # The interrupted batch left nothing: every payout is the final attempt's.
    assert db.rows("SELECT DISTINCT job_run_id, fence FROM payouts_payout") == [(run_id, fence)]
