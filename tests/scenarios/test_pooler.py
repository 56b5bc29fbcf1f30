"""Scenario 8, the pooler: scenario 1 with every process behind PgBouncer in
transaction mode, where a session-level lock or a server-side cursor outlives the
transaction and sticks to a server connection that the next client then gets.

The engine takes only transaction-scoped advisory locks (pg_advisory_xact_lock), so
the counts are those of scenario 1, and no advisory lock is ever held by a backend that
is between transactions.
"""

from __future__ import annotations

import pytest

from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from tests.scenarios.pooler import ADVISORY_LOCKS, AdvisoryLockSampler, pgbouncer, pooled_transactions
from tests.scenarios.workloads import assert_every_tick_ran_once, run_probe_fleet

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]


def test_through_a_transaction_mode_pooler_each_tick_still_runs_once(scenario: Scenario) -> None:
    server, name = scenario.db.server, scenario.db.name
    with pgbouncer(server) as port, AdvisoryLockSampler(server=server, database=name) as locks:
        pooled = server.url(name, port=port, query="disable_server_side_cursors=true")
        scenario.fleet.environment["DATABASE_URL"] = pooled
        run_probe_fleet(scenario, schedulers=8)
        # The pooler still holds its server connections: a leaked session lock would be on one.
        assert scenario.db.scalar(ADVISORY_LOCKS, [name]) == 0
        transactions = pooled_transactions(port, name)
    assert_every_tick_ran_once(scenario, schedulers=8)
    assert locks.samples > 100
    assert locks.leaked == set(), "an advisory lock was held outside a transaction"
    # The processes really went through the pooler: it counted their transactions.
    assert transactions > 1000
