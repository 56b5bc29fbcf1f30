"""Scenario 2, crash mid-run: the worker paying a large catch-up is SIGKILLed inside its
write.

Naive cron has two bad endings here: the week is never paid (nobody notices the run
died) or it is paid again in part by a re-run that does not know what was written. Here
the run is detected as abandoned (no heartbeat), retried with a new fencing token on the
other worker, and every (restaurant, week) is paid exactly once with the right amounts.

The harness pins the victim at the write: it holds a SHARE lock on the payout table, so
the worker's INSERT waits inside its transaction, and the SIGKILL lands there.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import pytest

from support.processes import wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS, STALL_SECONDS, Scenario
from tests.scenarios.ledger import assert_ledger_correct

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 7, 20, 25, tzinfo=UTC)  # five minutes before the Sunday payout tick
TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
SPEED = 120.0  # the payout job's 600 s heartbeat timeout passes in 5 real seconds


def test_a_run_killed_mid_write_is_abandoned_and_rerun_paying_each_week_once(scenario: Scenario) -> None:
    db = scenario.db
    with scenario.payout_run_pinned("LOCK TABLE payouts_payout IN SHARE MODE", start=START, speed=SPEED) as pinned:
        run_id, first_fence, blocked = pinned.run_id, pinned.fence, pinned.backend
        victim = scenario.run_worker(run_id)
        victim.send(signal.SIGKILL)
        # Each of these is one step with nothing to count before its end: a step's patience.
        wait_for(lambda: not victim.alive(), timeout=STALL_SECONDS, what="the worker dying")
    # Its transaction dies with its connection: nothing of the killed attempt is written.
    wait_for(lambda: db.backend_gone(blocked), timeout=STALL_SECONDS, what="the killed worker's backend ending")
    assert db.scalar("SELECT count(*) FROM payouts_payout") == 0

    scenario.wait_run_reaches(run_id, "succeeded")
    scenario.stop("scheduler")
    scenario.stop("worker")

    attempts, fence, scheduled_for = db.rows(
        "SELECT attempts, fence, scheduled_for FROM job_runs WHERE id = %s", [run_id]
    )[0]
    assert scheduled_for == TICK and attempts == 2 and fence > first_fence
    kinds = [kind for (kind,) in db.rows("SELECT kind FROM job_run_events WHERE run_id = %s ORDER BY at, id", [run_id])]
    assert kinds == ["claimed", "started", "abandoned", "enqueued", "started", "succeeded"]
    paid = assert_ledger_correct(db, as_of=TICK)
    assert paid >= 30 * 5, "a large catch-up: every restaurant's finished weeks"
    # Everything was written by the second attempt, under its fence.
    assert db.rows("SELECT DISTINCT job_run_id, fence FROM payouts_payout") == [(run_id, fence)]
