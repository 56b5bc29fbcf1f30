"""Scenario: the leader dies under a Patroni cluster in synchronous mode, mid-run.

Three Patroni members of PostgreSQL 15 over one etcd (``tests/scenarios/patroni_cluster.py``,
never the machine's server), ``synchronous_mode`` on. A scheduler and a worker of the app
reach the cluster through libpq's multi-host URL (``target_session_attrs=read-write``) and
claim and run ticks at an accelerated clock: the project's own jobs and the simulation's
probes, which charge once per tick, guarded and fenced like a payment. Once they have
claimed and run a few ticks, the leader's postmaster is SIGKILLed.

What must hold:

1. Patroni elects a new leader, and the same processes (never restarted) claim and run
   ticks on it: no crash, no hang.
2. No committed claim is lost: every claim the scheduler logged (it logs after its commit)
   and every row read on the old leader before the kill is on the new leader.
3. No tick runs twice: one claim row per tick, at most one charge per tick, and every
   succeeded probe run charged. A run cut off by the crash is abandoned (its timeout) and
   retried with a new fence, and its guarded charge refuses a tick already charged.
4. The fence goes up across the failover: every token taken on the new leader carries a
   higher epoch (the timeline) than every token of the old one.

The recovery time (the kill to the first claim on the new leader, and to the first run
started there) is printed; docs/failover.md records it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from simulation.services import PROBE_JOB, SETTLEMENT_JOB
from support.processes import Fleet, SimulatedTime, wait_for
from tests.scenarios.harness import (
    BOOT_STALL_SECONDS,
    HANG_GUARD_SECONDS,
    PROCESS_ENVIRONMENT,
    Scenario,
    ScenarioDatabase,
    manage_at,
    wait_runs_succeeded,
)
from tests.scenarios.patroni_cluster import PatroniCluster, patroni_cluster

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

DATABASE = "tiffin_failover"
START = datetime(2027, 3, 9, 10, 0, tzinfo=UTC)  # a Tuesday: no payout tick in the window
SPEED = 60.0  # one simulated minute per real second: a probe tick every second
# Probe runs succeeded before the kill, and on the new leader after it.
RUNS_BEFORE = 8
RUNS_AFTER = 8
CLAIMED = re.compile(r"claimed (\S+) @ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00) ->")
EPOCH = 2**40


@dataclass
class Recovery:
    old_leader: str
    new_leader: str
    killed_instant: datetime  # the simulated clock's reading at the kill
    first_claim_seconds: float
    first_start_seconds: float


def test_a_leader_killed_in_synchronous_mode_loses_no_claim_and_runs_no_tick_twice(
    failover: tuple[PatroniCluster, Scenario],
) -> None:
    cluster, scenario = failover
    try:
        _failover_mid_run(cluster, scenario)
    except BaseException:
        print(scenario.fleet.log_tails(lines=40))
        print(cluster.log_tails())
        raise


def _failover_mid_run(cluster: PatroniCluster, scenario: Scenario) -> None:
    cluster.set_synchronous_mode(True)
    clock = SimulatedTime.starting(START, speed=SPEED, lead=3.0)
    scenario.start_workers(clock, 1, q_workers=2)
    scenario.start_schedulers(clock, 1)

    before = wait_runs_succeeded(scenario.db, PROBE_JOB, RUNS_BEFORE, stall=BOOT_STALL_SECONDS)
    old_leader = cluster.leader()
    # Mid-run: a settlement run (three simulated minutes, heartbeating) has just started.
    cut_off = scenario.wait_for_run(SETTLEMENT_JOB, "running", attempt=1)
    cut_off_fence = scenario.db.scalar("SELECT fence FROM job_runs WHERE id = %s", [cut_off])
    claims_before = _claims(scenario.db)
    recovery, new_db = _kill_leader_and_wait(cluster, scenario, clock)
    print(
        f"failover {recovery.old_leader} -> {recovery.new_leader}: first claim on the new leader "
        f"{recovery.first_claim_seconds:.1f} s after the kill, first run started {recovery.first_start_seconds:.1f} s"
    )
    wait_runs_succeeded(new_db, PROBE_JOB, before + RUNS_AFTER)
    on_new_leader = Scenario(db=new_db, fleet=scenario.fleet)
    # The run cut off by the crash is retried like an abandoned one, under a new fence.
    on_new_leader.wait_run_reaches(cut_off, "succeeded")
    scenario.stop("scheduler")
    on_new_leader.wait_until_idle()
    scenario.stop("worker")

    assert recovery.new_leader != old_leader.name
    assert scenario.fleet.crashed() == [], "every process rode out the failover"
    assert all(process.starts == 1 for process in scenario.fleet.processes.values()), "nothing was restarted"
    # 2. No committed claim lost: read before the kill, or logged by the scheduler.
    claims_after = set(_claims(new_db))
    assert set(claims_before) <= claims_after
    logged = _logged_claims(scenario)
    assert logged and logged <= {(job, tick) for job, tick, _ in claims_after}
    # 3. No tick run twice.
    assert len({(job, tick) for job, tick, _ in claims_after}) == len(claims_after)
    charges = new_db.counts(
        "SELECT job_name || ' ' || scheduled_for, count(*) FROM simulation_probe_charges GROUP BY 1"
    )
    assert charges and set(charges.values()) == {1}, "a tick was charged more than once"
    uncharged = new_db.scalar(
        "SELECT count(*) FROM job_runs r WHERE r.job_name = ANY(%s) AND r.status = 'succeeded' AND NOT EXISTS "
        "(SELECT 1 FROM simulation_probe_charges c "
        "WHERE c.job_name = r.job_name AND c.scheduled_for = r.scheduled_for)",
        [[PROBE_JOB, SETTLEMENT_JOB]],
    )
    assert uncharged == 0, "a probe run succeeded without its charge"
    attempts, fence = new_db.rows("SELECT attempts, fence FROM job_runs WHERE id = %s", [cut_off])[0]
    assert attempts >= 2 and fence // EPOCH > cut_off_fence // EPOCH, (attempts, fence, cut_off_fence)
    # 4. The fence: the new leader's tokens are above every token of the old one.
    started = new_db.rows("SELECT at, fence FROM job_run_events WHERE kind = 'started'")
    before_kill = [fence for at, fence in started if at < recovery.killed_instant]
    after_kill = [fence for at, fence in started if at > recovery.killed_instant]
    assert before_kill and after_kill and len(before_kill) + len(after_kill) == len(started)
    assert min(after_kill) > max(before_kill), "a token after the failover is not above every token before it"
    assert min(after_kill) // EPOCH > max(before_kill) // EPOCH, "the epoch went up with the promotion"
    assert len({fence for _, fence in started}) == len(started), "a token was handed out twice"


def _kill_leader_and_wait(
    cluster: PatroniCluster, scenario: Scenario, clock: SimulatedTime
) -> tuple[Recovery, ScenarioDatabase]:
    """SIGKILL the leader's postmaster; wait for a new leader, a claim made on it and a run
    started on it (both stamped after the kill); the recovery and the new leader's database."""
    old = cluster.leader()
    killed_at = time.monotonic()
    killed_instant = clock.now()
    cluster.kill_postmaster(old)
    new = cluster.leader()
    new_db = ScenarioDatabase(server=new.server, name=scenario.db.name)
    seen: dict[str, float] = {}

    def recovered() -> bool:
        if "claim" not in seen and new_db.scalar(
            "SELECT count(*) FROM job_runs WHERE created_at > %s", [killed_instant]
        ):
            seen["claim"] = time.monotonic() - killed_at
        if "start" not in seen and new_db.scalar(
            "SELECT count(*) FROM job_run_events WHERE kind = 'started' AND at > %s", [killed_instant]
        ):
            seen["start"] = time.monotonic() - killed_at
        return len(seen) == 2

    wait_for(recovered, timeout=180, interval=0.1, what="a claim and a start on the new leader")
    recovery = Recovery(
        old_leader=old.name,
        new_leader=new.name,
        killed_instant=killed_instant,
        first_claim_seconds=seen["claim"],
        first_start_seconds=seen["start"],
    )
    return recovery, new_db


def _claims(db: ScenarioDatabase) -> list[tuple[str, datetime, str]]:
    return [
        (job, tick, subject) for job, tick, subject in db.rows("SELECT job_name, scheduled_for, subject FROM job_runs")
    ]


def _logged_claims(scenario: Scenario) -> set[tuple[str, datetime]]:
    """The claims the scheduler logged: it logs a pass's claims after the pass committed them."""
    text = "\n".join(p.log_path.read_text(errors="replace") for p in scenario.fleet.named("scheduler"))
    return {(job, datetime.fromisoformat(tick)) for job, tick in CLAIMED.findall(text)}


@pytest.fixture
def failover(tmp_path: Path) -> Iterator[tuple[PatroniCluster, Scenario]]:
    """A Patroni cluster with a migrated DATABASE, and an empty fleet whose DATABASE_URL is
    the cluster's multi-host URL; every process stopped however the scenario ends."""
    with patroni_cluster() as cluster:
        leader = cluster.leader()
        leader.server.create_database(DATABASE)
        url = cluster.url(DATABASE)
        migrate = manage_at(url, "migrate", "--noinput", "--verbosity", "0")
        assert migrate.returncode == 0, migrate.stderr
        environment = {
            "DATABASE_URL": url,
            **PROCESS_ENVIRONMENT,
            "SCHEDULER_EXTRA_JOB_MODULES": "simulation.probe_jobs",
        }
        with Fleet(environment=environment, log_dir=tmp_path / "logs", grace=8.0) as fleet:
            yield cluster, Scenario(db=ScenarioDatabase(server=leader.server, name=DATABASE), fleet=fleet)
