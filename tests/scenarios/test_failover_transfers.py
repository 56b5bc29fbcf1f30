"""Scenario: the money across an asynchronous failover. A payout run commits its payouts
and their transfers on the primary, the sender sends them, the provider pays them, and the
primary dies before any of it reached the standby (issue 33, docs/failover.md).

A primary and its streaming standby run on throwaway clusters (``tests/scenarios/cluster.py``),
the app reaches them through libpq's multi-host URL (``target_session_attrs=read-write``),
and the provider is the sandbox process (``simulation/provider_process.py``). With the
restaurants and their orders replicated, the primary's WAL sender is paused (SIGSTOP):

1. On the old primary: the weekly payout run, then a sender; the provider holds one
   transfer per paid week, the old ledger says sent.
2. The primary crashes (immediate stop), the standby is promoted: no payout, no transfer
   row. The catch-up (the same payout tick, run again) writes them again, with the same
   business keys, and a sender sends them.
3. The restaurant is paid once per week at the provider, and the new ledger records the
   provider's existing transfer:

   - **key remembered** (the catch-up minutes later): the provider replays each key;
   - **key forgotten** (the catch-up two days later, past the provider's 24-hour key
     retention): a blind send would create a second transfer; the sender's first attempt
     at a week that ended longer ago than the retention looks the transfer group up
     (``transfers.services._sent_before_the_ledger_knew``) and finds it.

   Then the daily reconciliation, on the new primary, finds nothing to report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from simulation.provider_process import running_sandbox
from support.processes import Fleet, SimulatedTime
from tests.scenarios.cluster import ThrowawayCluster, replicated_pair
from tests.scenarios.harness import HANG_GUARD_SECONDS, PROCESS_ENVIRONMENT, Scenario, ScenarioDatabase
from tests.scenarios.replication import pause_wal_sender, wait_replayed
from transfers import provider

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

DATABASE = "tiffin_failover_transfers"
NOW = datetime(2027, 3, 7, 20, 40, tzinfo=UTC)
PAYOUT_TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
SEND = (
    "from tiffin import clock; from transfers.services import transfers_send_due; "
    "print(transfers_send_due(fence={fence}, job_run_id=None, read_clock=clock.now, concurrency=2, batch_size=50))"
)
TRANSFERS = "SELECT transfer_group, status, provider_id FROM transfers_transfer ORDER BY transfer_group"
# The provider's default key retention (the sandbox's, and PAYMENT_PROVIDER_KEY_RETENTION_SECONDS).
RETENTION = timedelta(days=1)


@pytest.mark.parametrize(
    ("catch_up_after", "key_forgotten"),
    [
        pytest.param(timedelta(minutes=20), False, id="key-remembered"),
        pytest.param(2 * RETENTION, True, id="key-forgotten"),
    ],
)
def test_a_payout_sent_then_lost_in_a_failover_is_paid_once_at_the_provider(
    failover_scenario: tuple[Scenario, ThrowawayCluster, ThrowawayCluster],
    catch_up_after: timedelta,
    key_forgotten: bool,
    tmp_path: Path,
    settings: Any,
) -> None:
    scenario, primary, standby = failover_scenario
    scenario.seed(restaurants=3, weeks=2, now=NOW - timedelta(minutes=5))
    scenario.db.rows("UPDATE orders_restaurant SET provider_account = 'acct_Seeded' || id RETURNING id")
    wait_replayed(primary.server)

    with running_sandbox(state_path=tmp_path / "provider.sqlite3", log_path=tmp_path / "provider.log") as sandbox:
        env = {
            **scenario.fleet.environment,
            "PAYMENT_PROVIDER_URL": sandbox.url,
            "PAYMENT_PROVIDER_KEY": "sk_test_scenario",
        }
        pause_wal_sender(primary.server)
        _pay(scenario, at=NOW)
        positive = scenario.db.scalar("SELECT count(*) FROM payouts_payout WHERE net > 0")
        assert positive > 3
        _send(scenario, env, fence=1, at=NOW + timedelta(minutes=1), expect_sent=positive)
        old_ledger = scenario.db.rows(TRANSFERS)
        assert [status for _, status, _ in old_ledger] == ["sent"] * positive
        assert sandbox.state()["transfers"] == positive

        primary.stop_immediate()
        standby.promote()
        new_db = ScenarioDatabase(server=standby.server, name=DATABASE)
        # The new primary never saw the payout run: the weeks look unpaid.
        assert new_db.scalar("SELECT count(*) FROM payouts_payout") == 0
        assert new_db.rows(TRANSFERS) == []

        later = NOW + catch_up_after
        if key_forgotten:
            sandbox.advance_clock(catch_up_after.total_seconds())
            assert sandbox.state()["idempotency_keys"] == 0, "the provider forgot every key"
        _pay(scenario, at=later)
        assert [group for group, _, _ in new_db.rows(TRANSFERS)] == [group for group, _, _ in old_ledger]
        _send(scenario, env, fence=2, at=later + timedelta(minutes=1), expect_sent=positive)

        settings.PAYMENT_PROVIDER_URL = sandbox.url
        settings.PAYMENT_PROVIDER_KEY = "sk_test_scenario"
        held = provider.transfers_all(client=provider.provider_client())
        per_week = Counter(item.transfer_group for item in held)
        doubled = {group: count for group, count in per_week.items() if count > 1}
        assert doubled == {}, f"transfers doubled at the provider: {doubled}"
        assert sandbox.state()["transfers"] == positive
        # The new ledger records the provider's existing transfers, as the lost one did.
        assert new_db.rows(TRANSFERS) == old_ledger
        assert sorted((item.transfer_group, "sent", item.id) for item in held) == old_ledger

        # The daily reconciliation on the new primary: the provider and the ledger agree.
        # No window: the sandbox dates its transfers by the real clock, the app by 2027's.
        reconciled = scenario.manage(
            "run_job",
            "reconcile-transfers",
            "--sync",
            clock=_clock(later + timedelta(hours=8)),
            env={**env, "TRANSFERS_RECONCILE_WINDOW_DAYS": "0"},
        )
        assert reconciled.returncode == 0, reconciled.stderr
        [result] = new_db.rows("SELECT result FROM job_runs WHERE job_name = 'reconcile-transfers'")
        assert result[0]["mismatches"] == 0, result[0]["problems"]


@pytest.fixture
def failover_scenario(tmp_path: Path) -> Iterator[tuple[Scenario, ThrowawayCluster, ThrowawayCluster]]:
    """A migrated DATABASE on a primary with an asynchronous standby, and a scenario whose
    processes reach whichever accepts writes; everything stopped however the test ends."""
    with replicated_pair() as (primary, standby):
        primary.server.create_database(DATABASE)
        hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        url = f"postgres://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"
        with Fleet(environment={"DATABASE_URL": url, **PROCESS_ENVIRONMENT}, log_dir=tmp_path / "logs") as fleet:
            scenario = Scenario(db=ScenarioDatabase(server=primary.server, name=DATABASE), fleet=fleet)
            migrated = scenario.manage("migrate", "--noinput", "--verbosity", "0")
            assert migrated.returncode == 0, migrated.stderr
            yield scenario, primary, standby


def _clock(at: datetime) -> SimulatedTime:
    return SimulatedTime.starting(at, speed=1.0)


def _pay(scenario: Scenario, *, at: datetime) -> None:
    """The weekly payout run for PAYOUT_TICK, executed here, with the clock at ``at``."""
    paid = scenario.manage(
        "run_job", "weekly-payouts", "--sync", "--scheduled-for", PAYOUT_TICK.isoformat(),
        clock=_clock(at),
    )  # fmt: skip
    assert paid.returncode == 0, paid.stderr


def _send(scenario: Scenario, env: dict[str, str], *, fence: int, at: datetime, expect_sent: int) -> None:
    """One sender pass (the send-transfers job's code) with the clock at ``at``."""
    sent = scenario.manage("shell", "-c", SEND.format(fence=fence), clock=_clock(at), env=env)
    assert sent.returncode == 0, sent.stderr
    assert f"'sent': {expect_sent}" in sent.stdout, sent.stdout
