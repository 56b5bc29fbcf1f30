"""Migration 0008 on a ledger that already has payouts, as a deployment meets it: the
plain table as it was (migrated back to 0007), then forward to yearly partitions and
back again. Every payout keeps its id and amounts, and ids continue from the table's.
The old table becomes the first partition up to the end of its newest period's year
(the rest of that year is written to it too; the next year has its own)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from payouts.partitions import HISTORY, year_after, year_name, year_start
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

LEDGER = "SELECT id, restaurant_id, period_start, period_end, gross, commission, net FROM payouts_payout ORDER BY id"
WHERE = "SELECT tableoid::regclass::text, count(*) FROM payouts_payout GROUP BY 1 ORDER BY 1"


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def test_an_existing_ledger_is_partitioned_and_unpartitioned_without_losing_a_cent(scenario: Scenario) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    # Paid by today's code, then taken back to the plain table of 0007: the code that paid
    # also writes the transfer and statement outboxes, whose migrations follow the ledger's,
    # so it cannot run on the old schema itself; the rows it leaves are the same.
    scenario.seed(restaurants=6, weeks=20, now=now)
    _ok(scenario.manage("catch_up_payouts", "--as-of", (now - timedelta(weeks=1)).isoformat()))
    before = scenario.db.rows(LEDGER)
    assert len(before) >= 6 * 18
    _ok(scenario.manage("migrate", "payouts", "0007", "--noinput", "-v0"))
    assert scenario.db.scalar("SELECT relkind FROM pg_class WHERE relname = 'payouts_payout'") == "r"
    assert scenario.db.rows(LEDGER) == before

    _ok(scenario.manage("migrate", "--noinput", "-v0"))
    assert scenario.db.scalar("SELECT relkind FROM pg_class WHERE relname = 'payouts_payout'") == "p"
    assert scenario.db.rows(LEDGER) == before
    assert scenario.db.rows(WHERE) == [(HISTORY, len(before))]  # the old table, attached as it was
    _ok(scenario.manage("catch_up_payouts", "--as-of", now.isoformat()))
    after = scenario.db.rows(LEDGER)
    new = after[len(before) :]
    assert new and after[: len(before)] == before
    assert min(row[0] for row in new) > max(row[0] for row in before)  # ids continue the table's

    _ok(scenario.manage("migrate", "payouts", "0007", "--noinput", "-v0"))
    assert scenario.db.scalar("SELECT relkind FROM pg_class WHERE relname = 'payouts_payout'") == "r"
    assert scenario.db.rows(LEDGER) == after
    _ok(scenario.manage("migrate", "--noinput", "-v0"))
    assert scenario.db.rows(LEDGER) == after
    # Migrated again, the first partition ends where its newest period's year does.
    newest = max(row[2] for row in after)
    expected = max(year_start(now), year_after(year_start(newest)))
    assert (
        scenario.db.scalar("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = %s", [HISTORY])
        == f"FOR VALUES FROM (MINVALUE) TO ('{expected:%Y-%m-%d} 00:00:00+00')"
    )
    assert scenario.db.rows(WHERE) == [(HISTORY, len(after))]
    assert scenario.db.scalar("SELECT to_regclass(%s)::text", [year_name(expected)]) == year_name(expected)
