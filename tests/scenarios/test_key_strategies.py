"""The provider call's idempotency key, compared (``manage.py compare_keys``): with no key,
a uuid4 per attempt or the fence as the key, the same faults pay restaurant-weeks twice at
a real provider sandbox; Tiffin's transfer outbox pays each exactly once.

The wrong ways' doubles are asserted too: if the fault injection silently did nothing,
every row would be clean and this test would fail.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulation.key_strategies import FAULTS
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]


def test_bad_input_is_refused_and_changes_nothing(scenario: Scenario) -> None:
    done = scenario.manage("compare_keys", "--faults", "commit-then-timeout,meteor")
    assert done.returncode == 1
    assert "--faults 'commit-then-timeout,meteor': give a comma-separated list of" in done.stderr
    assert scenario.db.scalar("SELECT count(*) FROM orders_restaurant") == 0


def test_only_the_business_identity_key_pays_every_week_once_through_every_fault(scenario: Scenario) -> None:
    done = scenario.manage("compare_keys", "--restaurants", "2", "--weeks", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    cells: dict[tuple[str, str], dict[str, Any]] = {
        (cell["strategy"], cell["fault"]): cell for cell in json.loads(done.stdout)["cells"]
    }
    weeks = scenario.db.scalar("SELECT count(*) FROM payouts_payout WHERE net > 0")
    assert weeks >= 2 and all(cell["weeks"] == weeks for cell in cells.values())

    for fault in FAULTS:
        tiffin = cells["tiffin", fault]
        assert (tiffin["transfers"], tiffin["doubled"], tiffin["missing"]) == (weeks, 0, 0), tiffin
        assert tiffin["unpaid_in_ledger"] == 0, tiffin
        # Each fault did happen: the ways without a stable key paid some week twice.
        for wrong in ("no-key", "uuid4"):
            assert cells[wrong, fault]["doubled"] >= 1, cells[wrong, fault]
            assert cells[wrong, fault]["missing"] == 0, cells[wrong, fault]
    # The fence as the key survives a retry inside its run (the provider replays), not a
    # retry by the next run or a second worker: another fence, another key.
    assert cells["fence", "commit-then-timeout"]["doubled"] == 0
    assert cells["fence", "commit-then-500"]["doubled"] == 0
    assert cells["fence", "died-after-answer"]["doubled"] >= 1
    assert cells["fence", "second-worker"]["doubled"] >= 1
