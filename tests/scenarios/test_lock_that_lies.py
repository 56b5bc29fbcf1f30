"""Scenario 3, the lock that lies: a worker holding a run pauses (a GC pause, a stopped
VM, SIGSTOP here) until its lease has moved on, then wakes and carries on writing.

With a lease alone, the woken worker writes on top of the run that replaced it. Here
the run is abandoned and re-run elsewhere with a higher fencing token, which writes the
payouts; when the paused worker wakes, its write is refused by ``fence_check``, nothing
is paid twice, and the refusal is recorded in job_run_events.

The harness pins the victim before its write: an ACCESS EXCLUSIVE lock on the restaurant
table makes the run's first query wait, the worker is stopped while it waits, and the
lock is released (the query completes server-side; the stopped client reads it later).
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import pytest

from support.processes import wait_for
from tests.scenarios.harness import Scenario
from tests.scenarios.ledger import assert_ledger_correct

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(180)]

START = datetime(2027, 3, 7, 20, 25, tzinfo=UTC)
TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
SPEED = 120.0


def test_a_paused_worker_that_wakes_after_its_run_moved_on_is_refused_by_the_fence(scenario: Scenario) -> None:
    db = scenario.db
    lock = "LOCK TABLE orders_restaurant IN ACCESS EXCLUSIVE MODE"
    with scenario.payout_run_pinned(lock, start=START, speed=SPEED) as pinned:
        run_id, stale_fence = pinned.run_id, pinned.fence
        sleeper = scenario.run_worker(run_id)
        sleeper.send(signal.SIGSTOP)

    # While it sleeps, the run is abandoned and re-run on the other worker, which pays.
    scenario.wait_for_run("weekly-payouts", "succeeded", timeout=60)
    fence = db.scalar("SELECT fence FROM job_runs WHERE id = %s", [run_id])
    assert fence > stale_fence
    paid = assert_ledger_correct(db, as_of=TICK)

    sleeper.send(signal.SIGCONT)
    rejected = "SELECT fence, message FROM job_run_events WHERE run_id = %s AND kind = 'fail_rejected'"
    wait_for(lambda: bool(db.rows(rejected, [run_id])), timeout=30, what="the woken worker's write being refused")
    scenario.stop("scheduler")
    scenario.stop("worker")

    [(rejected_fence, message)] = db.rows(rejected, [run_id])
    assert rejected_fence == stale_fence
    assert "StaleFenceError" in message and f"fence {stale_fence} is stale for 'payouts:ledger'" in message
    # Nothing changed: the same payouts, all written under the newer fence.
    assert assert_ledger_correct(db, as_of=TICK) == paid
    assert db.rows("SELECT DISTINCT job_run_id, fence FROM payouts_payout") == [(run_id, fence)]
    assert db.scalar("SELECT token FROM job_fences WHERE resource = 'payouts:ledger'") == fence
    assert db.rows("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("succeeded", 2)]
