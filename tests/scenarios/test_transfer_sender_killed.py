"""A sender killed (SIGKILL) after the provider committed a transfer and before the ledger
recorded it: the provider holds the money, the ledger says pending. The next sender sends
the same key, gets the provider's replay, and records it: one transfer per paid week.

Real processes: PostgreSQL, the provider sandbox, and each sender a ``manage.py shell``
of its own. The kill is pinned by the provider's state (the transfer committed, its
answer held back by the commit-then-timeout fault), never by a sleep.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from simulation.provider_process import running_sandbox
from support.processes import PROJECT_DIR, SimulatedTime, stop_group, wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from transfers import provider

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

NOW = datetime(2027, 3, 7, 20, 40, tzinfo=UTC)
PAYOUT_TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
# One transfer at a time, so the kill lands with exactly one request in flight.
SEND = (
    "from tiffin import clock; from transfers.services import transfers_send_due; "
    "print(transfers_send_due(fence={fence}, job_run_id=None, read_clock=clock.now, concurrency=1, batch_size=50))"
)


def test_a_sender_killed_between_the_providers_commit_and_its_own_pays_each_week_once(
    scenario: Scenario, tmp_path: Path, settings: Any
) -> None:
    db = scenario.db
    scenario.seed(restaurants=3, weeks=2, now=NOW - timedelta(minutes=5))
    paid = scenario.manage(
        "run_job", "weekly-payouts", "--sync", "--scheduled-for", PAYOUT_TICK.isoformat(),
        clock=SimulatedTime.starting(NOW, speed=1.0),
    )  # fmt: skip
    assert paid.returncode == 0, paid.stderr
    db.rows("UPDATE orders_restaurant SET provider_account = 'acct_Seeded' || id RETURNING id")
    positive = db.scalar("SELECT count(*) FROM payouts_payout WHERE net > 0")
    assert positive > 3 and db.scalar("SELECT count(*) FROM transfers_transfer") == positive

    with running_sandbox(state_path=tmp_path / "provider.sqlite3", log_path=tmp_path / "provider.log") as sandbox:
        env = {
            **scenario.fleet.environment,
            "PAYMENT_PROVIDER_URL": sandbox.url,
            "PAYMENT_PROVIDER_KEY": "sk_test_scenario",
            "PAYMENT_PROVIDER_TIMEOUT_SECONDS": "120",
        }
        # The first request commits at the provider; its answer is held for a minute.
        sandbox.arm_fault("commit-then-timeout", count=1, methods=("POST",), delay_ms=60_000)
        first = subprocess.Popen(
            [sys.executable, str(PROJECT_DIR / "manage.py"), "shell", "-c", SEND.format(fence=1)],
            env={**env, **SimulatedTime.starting(NOW + timedelta(minutes=1), speed=1.0).environment()},
            cwd=PROJECT_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for(lambda: sandbox.state()["transfers"] == 1, timeout=60, interval=0.05, what="the provider's commit")
        finally:
            stop_group(first, grace=0.0, sig=signal.SIGKILL)
        assert first.returncode == -signal.SIGKILL
        # The provider paid; the ledger does not know it.
        assert db.scalar("SELECT count(*) FROM transfers_transfer WHERE status = 'sent'") == 0
        assert db.rows("SELECT attempts FROM transfers_transfer WHERE attempts > 0") == [(1,)]

        # Later (past the killed attempt's lease), another sender, a newer fence.
        later = SimulatedTime.starting(NOW + timedelta(minutes=10), speed=1.0)
        second = scenario.manage("shell", "-c", SEND.format(fence=2), clock=later, env=env)
        assert second.returncode == 0, second.stderr
        assert f"'sent': {positive}" in second.stdout, second.stdout

        settings.PAYMENT_PROVIDER_URL = sandbox.url
        settings.PAYMENT_PROVIDER_KEY = "sk_test_scenario"
        held = provider.transfers_all(client=provider.provider_client())
    ledger = {
        group: (amount, destination, provider_id)
        for group, amount, destination, provider_id in db.rows(
            "SELECT t.transfer_group, t.amount_minor, t.destination, t.provider_id FROM transfers_transfer t "
            "JOIN payouts_payout p ON (p.restaurant_id, p.period_start) = (t.restaurant_id, t.period_start) "
            "WHERE p.net > 0 AND t.amount_minor = (p.net * 100)::bigint AND t.status = 'sent'"
        )
    }
    assert len(ledger) == positive
    assert sorted(item.transfer_group for item in held) == sorted(ledger)  # one each, none unknown
    assert all(ledger[item.transfer_group] == (item.amount, item.destination, item.id) for item in held)
