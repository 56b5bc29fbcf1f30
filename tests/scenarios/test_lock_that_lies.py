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
from datetime import UTC, datetime, timedelta

import pytest

from support.processes import wait_while_progressing
from tests.scenarios.harness import HANG_GUARD_SECONDS, STALL_SECONDS, Scenario
from tests.scenarios.ledger import assert_ledger_correct

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

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
    scenario.wait_run_reaches(run_id, "succeeded")
    fence = db.scalar("SELECT fence FROM job_runs WHERE id = %s", [run_id])
    assert fence > stale_fence
    paid = assert_ledger_correct(db, as_of=TICK)

    sleeper.send(signal.SIGCONT)
    late_words = "SELECT fence FROM job_run_events WHERE run_id = %s AND kind IN ('fail_rejected', 'finish_rejected')"
    abandoned = "SELECT fence FROM job_run_events WHERE run_id = %s AND kind = 'abandoned'"

    def late_words_to_come() -> int:  # every attempt the run moved on from has its word refused
        return len({row[0] for row in db.rows(abandoned, [run_id])} - {row[0] for row in db.rows(late_words, [run_id])})

    wait_while_progressing(late_words_to_come, stall=STALL_SECONDS, what="the woken worker's write being refused")
    scenario.stop("scheduler")
    scenario.stop("worker")

    # How many attempts the run took follows from its record: one per start, and every
    # start but the last abandoned after a lease of silence. The sleeper's is the first;
    # a loaded machine may starve a later attempt for a whole lease too (at 120x the
    # lease is five real seconds), and then it is abandoned and re-run the same way.
    events = db.rows(
        "SELECT kind, attempt, fence, at, message FROM job_run_events WHERE run_id = %s ORDER BY id", [run_id]
    )
    starts = [(attempt, fence_of) for kind, attempt, fence_of, _, _ in events if kind == "started"]
    assert starts[0] == (1, stale_fence) and [attempt for attempt, _ in starts] == list(range(1, len(starts) + 1))
    assert starts[-1][1] == fence
    lease = timedelta(seconds=db.scalar("SELECT timeout_seconds FROM job_schedules WHERE job_name = 'weekly-payouts'"))
    silences = [(fence_of, at, message) for kind, _, fence_of, at, message in events if kind == "abandoned"]
    assert [fence_of for fence_of, _, _ in silences] == [fence_of for _, fence_of in starts[:-1]], events
    for _, at, message in silences:
        since = datetime.fromisoformat(message.split("no heartbeat since ", 1)[1][:19] + "+00:00")
        assert at - since > lease, message  # (its whole seconds only make the silence longer)
    assert db.rows("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("succeeded", len(starts))]

    # Every attempt abandoned had its late word refused, once; the sleeper's at the write.
    refused = [(fence_of, message) for kind, _, fence_of, _, message in events if kind.endswith("_rejected")]
    assert sorted(fence_of for fence_of, _ in refused) == [fence_of for fence_of, _, _ in silences]
    [message] = [message for fence_of, message in refused if fence_of == stale_fence]
    assert "StaleFenceError" in message and f"fence {stale_fence} is stale for 'payouts:ledger'" in message
    # Nothing changed: the same payouts, all written under one newer fence (the last
    # attempt's, unless a starved attempt before it had written them), and the ledger's
    # fence is the last attempt's, which passed it.
    assert assert_ledger_correct(db, as_of=TICK) == paid
    [(payer, payer_fence)] = db.rows("SELECT DISTINCT job_run_id, fence FROM payouts_payout")
    assert payer == run_id and payer_fence in [fence_of for _, fence_of in starts[1:]]
    assert len(starts) > 2 or payer_fence == fence
    assert db.scalar("SELECT token FROM job_fences WHERE resource = 'payouts:ledger'") == fence
