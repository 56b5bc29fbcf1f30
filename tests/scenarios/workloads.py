"""Workloads that several scenarios run the same way (three charges, clock skew, pooler):
the probe jobs and every real job of the project, with restaurants whose weeks the
Sunday payout tick inside the window pays."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from support.processes import SimulatedTime
from tests.scenarios.harness import (
    Scenario,
    ScenarioDatabase,
    charges_per_tick,
    claimed_cron_ticks,
    expected_cron_ticks,
    succeeded_ticks,
    unjustified_skips,
)
from tests.scenarios.ledger import assert_ledger_correct

PROBES = ("probe-every-minute", "probe-every-2-minutes", "probe-every-5-minutes")
PROBE_START = datetime(2027, 3, 7, 19, 0, tzinfo=UTC)  # a Sunday, before the weekly payout tick
PROBE_SPEED = 240.0  # four simulated minutes per real second
PROBE_MINUTES = 130  # ticks of the probes alone: 130 + 65 + 26
PAYOUT_TICK = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)


def run_probe_fleet(scenario: Scenario, *, schedulers: int, skews: Sequence[float] = ()) -> SimulatedTime:
    """Two workers and ``schedulers`` scheduler processes for PROBE_MINUTES simulated
    minutes; then the schedulers stop, the claimed runs drain and the workers stop."""
    scenario.fleet.environment["SCHEDULER_EXTRA_JOB_MODULES"] = "tests.scenarios.jobs.probes"
    scenario.seed(restaurants=9, weeks=3, now=PROBE_START)
    # The schedules are registered half a minute before the window, by one pass run to its end:
    # every tick of the window is then due whenever the fleet finishes booting (a late
    # scheduler catches up), so how many ticks the test expects does not depend on how
    # fast this machine boots ten processes.
    registered = SimulatedTime.starting(PROBE_START - timedelta(seconds=30), speed=1.0)  # between two ticks
    done = scenario.manage("tick", "--now", registered.start.isoformat(), clock=registered)
    assert done.returncode == 0, done.stderr
    clock = SimulatedTime.starting(PROBE_START, speed=PROBE_SPEED, lead=3.0)
    scenario.start_workers(clock, 2, q_workers=2)
    scenario.start_schedulers(clock, schedulers, skews=skews)
    clock.sleep_until(clock.after(minutes=PROBE_MINUTES))
    scenario.stop("scheduler")
    scenario.wait_until_idle()
    scenario.stop("worker")
    assert not scenario.fleet.crashed(), "a process exited on its own"
    return clock


def assert_every_tick_ran_once(scenario: Scenario, *, schedulers: int) -> None:
    """Every cron tick due while the schedulers ran has exactly one claim row; each run
    succeeded with exactly one execution and one charge, except ticks a policy skips on
    purpose when the machine lags (coalesce, forbid, deadline), which have no charge;
    and every payout week has exactly one payout."""
    db = scenario.db
    expected, claimed = expected_cron_ticks(db), claimed_cron_ticks(db)
    first_seen = db.scalar("SELECT min(first_seen_at) FROM job_schedules WHERE job_name = ANY(%s)", [list(PROBES)])
    assert sum(len(expected[job]) for job in PROBES) >= 200, f"the probes were first seen at {first_seen}"
    for job_name, ticks in expected.items():
        assert claimed.get(job_name, []) == ticks, f"{job_name}: claimed ticks differ from the schedule's"
    outcomes = db.counts("SELECT status || ':' || skip_reason, count(*) FROM job_runs GROUP BY 1")
    assert set(outcomes) <= {"succeeded:", "skipped:coalesced", "skipped:overlap", "skipped:missed_deadline"}, outcomes
    for job_name in PROBES:
        succeeded = succeeded_ticks(db, job_name)
        assert succeeded, f"{job_name}: no tick ran"
        assert unjustified_skips(db, job_name) == [], f"{job_name}: a skip its policies did not call for"
        charges = charges_per_tick(db, job_name)
        assert set(charges) == set(succeeded), f"{job_name}: a run that succeeded never charged"
        assert set(charges.values()) == {1}, f"{job_name}: a tick was charged more than once"
    # Allow and catch up: nothing may be skipped.
    assert succeeded_ticks(db, "probe-every-minute") == expected["probe-every-minute"]
    starts = db.scalar(
        "SELECT count(*) FROM job_run_events e JOIN job_runs r ON r.id = e.run_id "
        "WHERE e.kind = 'started' AND r.job_name = ANY(%s)",
        [list(PROBES)],
    )
    assert starts == sum(len(succeeded_ticks(db, job_name)) for job_name in PROBES), "a run started twice"
    assert db.scalar("SELECT count(*) FROM job_scheduler_nodes WHERE passes > 0") == schedulers
    assert succeeded_ticks(db, "weekly-payouts") == [PAYOUT_TICK]
    assert assert_ledger_correct(db, as_of=PAYOUT_TICK) >= 9 * 2


# The outbox senders have one attempt per run: a sender killed or paused past its lease is
# dead, and the next minute's tick sends what it left.
ONE_ATTEMPT_SENDERS = ("send-transfers", "send-statements")


def assert_runs_settled(db: ScenarioDatabase) -> None:
    """No run still running or enqueued; a dead run only of a one-attempt sender, and each
    followed by a later tick of its job that succeeded."""
    assert db.scalar("SELECT count(*) FROM job_runs WHERE status IN ('running', 'enqueued')") == 0
    dead = db.rows("SELECT job_name, scheduled_for FROM job_runs WHERE status = 'dead'")
    assert {job for job, _ in dead} <= set(ONE_ATTEMPT_SENDERS), dead
    for job, at in dead:
        later = "SELECT count(*) FROM job_runs WHERE job_name = %s AND scheduled_for > %s AND status = 'succeeded'"
        assert db.scalar(later, [job, at]) > 0, f"{job} @ {at}: dead, and no later tick sent"
