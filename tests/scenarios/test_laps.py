"""Scenario 4, the run that laps itself: a run still going at the next tick.

Four slow jobs (tests/scenarios/jobs/laps.py), one per overlap policy, tick every 2
simulated minutes and run for 5. They run side by side in one set of processes (two
schedulers, two workers); each test below checks the promise of one policy against
what the database recorded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from support.processes import SimulatedTime
from tests.scenarios.harness import (
    HANG_GUARD_SECONDS,
    STALL_SECONDS,
    PostgresServer,
    ScenarioDatabase,
    open_scenario,
    unjustified_skips,
)
from tests.scenarios.jobs.laps import INTERVAL_MINUTES, RUN_SECONDS

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
SPEED = 60.0  # a simulated minute per real second: a run lasts 5 s, a tick comes every 2 s
SIMULATED_MINUTES = 25


@dataclass(frozen=True)
class Run:
    id: int
    scheduled_for: datetime
    status: str
    skip_reason: str
    started_at: datetime | None
    finished_at: datetime | None
    charges: int
    events: tuple[str, ...]


class Laps(dict[str, list[Run]]):
    """Each job's runs, oldest first, and the skips no policy called for (see
    ``harness.unjustified_skips``), by job."""

    unjustified_skips: dict[str, list[tuple[int, str]]]


@pytest.fixture(scope="module")
def laps(pg_server: PostgresServer, scenario_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Laps]:
    """Run the four jobs for 25 simulated minutes; return each job's runs, oldest first."""
    with open_scenario(
        server=pg_server, template=scenario_template, label="laps", log_dir=tmp_path_factory.mktemp("laps")
    ) as scenario:
        scenario.fleet.environment["SCHEDULER_EXTRA_JOB_MODULES"] = "tests.scenarios.jobs.laps"
        clock = SimulatedTime.starting(START, speed=SPEED, lead=3.0)
        scenario.start_workers(clock, 2, q_workers=5)
        scenario.start_schedulers(clock, 2)
        clock.sleep_until(clock.after(minutes=SIMULATED_MINUTES))
        scenario.stop("scheduler")
        # Queue keeps a backlog (runs are longer than the interval); the others drain.
        finishing = ["lap-allow", "lap-forbid", "lap-replace"]
        # A run lasts RUN_SECONDS simulated: no run finishes for that long without a fault.
        scenario.wait_until_idle(stall=STALL_SECONDS + RUN_SECONDS / SPEED, jobs=finishing)
        scenario.stop("worker")
        runs = Laps(_runs_by_job(scenario.db))
        runs.unjustified_skips = {job: unjustified_skips(scenario.db, job) for job in runs}
        yield runs


def _runs_by_job(db: ScenarioDatabase) -> dict[str, list[Run]]:
    events: dict[int, list[str]] = {}
    for run_id, kind in db.rows("SELECT run_id, kind FROM job_run_events ORDER BY at, id"):
        events.setdefault(run_id, []).append(kind)
    charges = db.counts("SELECT run_id, count(*) FROM simulation_probe_charges GROUP BY run_id")
    runs: dict[str, list[Run]] = {}
    for job_name, run_id, scheduled_for, status, skip_reason, started_at, finished_at in db.rows(
        "SELECT job_name, id, scheduled_for, status, skip_reason, started_at, finished_at FROM job_runs "
        "WHERE job_name LIKE 'lap-%%' ORDER BY scheduled_for"
    ):
        run = Run(
            run_id,
            scheduled_for,
            status,
            skip_reason,
            started_at,
            finished_at,
            charges=charges.get(run_id, 0),
            events=tuple(events.get(run_id, [])),
        )
        runs.setdefault(job_name, []).append(run)
    return runs


def _overlapping(a: Run, b: Run) -> bool:
    assert a.started_at and a.finished_at and b.started_at and b.finished_at
    return a.started_at < b.finished_at and b.started_at < a.finished_at


def _pairs(runs: list[Run]) -> Iterator[tuple[Run, Run]]:
    for i, first in enumerate(runs):
        for second in runs[i + 1 :]:
            yield first, second


def _every_tick(runs: list[Run]) -> None:
    """Each job was claimed at every tick of the window, once (the claim key)."""
    ticks = [run.scheduled_for for run in runs]
    assert len(ticks) >= SIMULATED_MINUTES // INTERVAL_MINUTES - 1
    assert all(later - earlier == timedelta(minutes=INTERVAL_MINUTES) for earlier, later in itertools.pairwise(ticks))


def test_allow_runs_every_tick_even_while_the_previous_run_is_still_going(laps: dict[str, list[Run]]) -> None:
    runs = laps["lap-allow"]
    _every_tick(runs)
    assert {run.status for run in runs} == {"succeeded"}
    assert [run.charges for run in runs] == [1] * len(runs)
    overlaps = sum(_overlapping(a, b) for a, b in _pairs(runs))
    assert overlaps >= len(runs) - 1, "allow should let consecutive runs overlap"


def test_forbid_skips_the_ticks_that_arrive_while_a_run_is_going(laps: dict[str, list[Run]]) -> None:
    runs = laps["lap-forbid"]
    _every_tick(runs)
    ran = [run for run in runs if run.status == "succeeded"]
    skipped = [run for run in runs if run.status == "skipped"]
    assert len(ran) + len(skipped) == len(runs)
    assert {run.skip_reason for run in skipped} == {"overlap"}
    assert len(skipped) >= len(ran), "a 5-minute run every 2 minutes must skip at least every other tick"
    assert not any(_overlapping(a, b) for a, b in _pairs(ran))
    for run in skipped:  # each skip happened while a run was going
        assert run.finished_at is not None
        assert any(r.started_at and r.finished_at and r.started_at <= run.finished_at <= r.finished_at for r in ran)
    assert [run.charges for run in ran] == [1] * len(ran)
    assert sum(run.charges for run in skipped) == 0


def test_queue_runs_every_tick_one_after_another_in_order(laps: dict[str, list[Run]]) -> None:
    runs = laps["lap-queue"]
    _every_tick(runs)
    assert {run.status for run in runs} <= {"succeeded", "running", "enqueued"}, "queue never skips"
    done = [run for run in runs if run.status == "succeeded"]
    assert len(done) >= 3
    assert runs[: len(done)] == done, "the queue runs ticks in order"
    for earlier, later in itertools.pairwise(done):
        assert earlier.finished_at and later.started_at and later.started_at >= earlier.finished_at
    assert [run.charges for run in done] == [1] * len(done)
    waiting = [run for run in runs if run.status == "enqueued"]
    assert waiting, "runs longer than the interval build a backlog: the price of queue"
    assert sum(run.charges for run in waiting) == 0


def test_replace_supersedes_the_running_run_which_then_cannot_finish(laps: Laps) -> None:
    runs = laps["lap-replace"]
    _every_tick(runs)
    *older, last = runs
    # An older tick is superseded by the newer one that starts while it runs. If two workers
    # take the ticks out of order (a loaded machine), the older one comes to start after the
    # newer is already running and is skipped instead; the skip must name that newer run.
    assert "superseded" in {run.status for run in older}
    assert {run.status for run in older} <= {"superseded", "skipped"}
    assert laps.unjustified_skips["lap-replace"] == []
    assert last.status == "succeeded" and last.charges == 1
    for run in (run for run in older if run.status == "superseded"):
        assert "superseded" in run.events
        # The superseded handler learned it at its next heartbeat and wrote nothing.
        assert run.events[-1] == "fail_rejected" and run.charges == 0
