"""What ``Simulation._settle`` promises: after the end it waits, for as long as something
moves, until a scheduler pass has looked at the end and every run of the window's ticks
has finished; runs after the end do not hold it; and a window that cannot settle ends the
wait and says what was left, which ``_stop`` puts in the report's "did not settle".

A simulation here starts no process: the database is the test's, and what the servers
would do meanwhile is done by the simulation's own pending actions (its restarts and
resumes), which the settle carries out on its clock (6000x: a simulated minute is 10 ms).
The patience (a minute without progress, and the broker's lock) is shortened to seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduling.models import JobRun, RunStatus, SchedulerNode, Trigger
from simulation import runner
from simulation.runner import Simulation, SimulationPlan

# A database that closes connections (close_old_connections) outside a test transaction.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

START = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
PLAN = SimulationPlan(servers=1, workers=1, start=START, duration=timedelta(minutes=30), speed=6000)
# The settle's patience here: DRAIN_SECONDS, and the broker's lock (2 x the 1 s task timeout).
PATIENCE = 2.0


@pytest.fixture
def simulation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Simulation, list[str]]:
    monkeypatch.setattr(runner, "DRAIN_SECONDS", 1.0)
    monkeypatch.setattr(runner, "TASK_TIMEOUT_FLOOR", 1)
    monkeypatch.setattr(runner, "TASK_MARGIN", 0)
    said: list[str] = []
    return Simulation(PLAN, log_dir=tmp_path, say=said.append), said


def _run(job: str, at: datetime, status: RunStatus, **fields: datetime) -> JobRun:
    return JobRun.objects.create(
        job_name=job, subject="", scheduled_for=at, due_at=at, created_at=at, status=status, trigger=Trigger.CRON,
        **fields,
    )  # fmt: skip


def _passed(at: datetime) -> None:
    SchedulerNode.objects.update_or_create(name="sim:1", defaults={"started_at": START, "last_pass_at": at})


def _timed(call: Callable[[], str]) -> tuple[str, float]:
    began = time.monotonic()
    return call(), time.monotonic() - began


def test_a_finished_window_settles_at_once_and_says_so(simulation):
    sim, said = simulation
    end = sim.clock.now() - timedelta(minutes=1)
    _run("sim-a", end - timedelta(minutes=5), RunStatus.SUCCEEDED, finished_at=end)
    # After the end: claimed, or waiting for a worker; not the window's, so not waited for.
    _run("sim-a", end + timedelta(seconds=1), RunStatus.ENQUEUED, enqueued_at=end)
    _run("sim-b", end + timedelta(minutes=5), RunStatus.SCHEDULED)
    _passed(end)
    left, took = _timed(lambda: sim._settle(end))
    assert left == ""
    assert took < PATIENCE
    assert [line.split(": ")[1] for line in said] == ["the window's runs and sends finished"]


def test_the_settle_waits_while_the_window_moves(simulation):
    sim, said = simulation
    end = sim.clock.now() - timedelta(minutes=1)
    running = _run("sim-a", end, RunStatus.RUNNING, enqueued_at=end)
    due = _run("sim-b", end - timedelta(minutes=1), RunStatus.SCHEDULED)
    _passed(end - timedelta(seconds=30))  # the window's last pass was before its end
    # What the servers do after the end, one step a simulated half hour (0.3 real s) apart:
    # a pass at the end; the running run finishes; the due run is taken and finishes.
    steps = [
        lambda: _passed(end + timedelta(seconds=5)),
        lambda: JobRun.objects.filter(id=running.id).update(status=RunStatus.SUCCEEDED, finished_at=end),
        lambda: JobRun.objects.filter(id=due.id).update(status=RunStatus.ENQUEUED, enqueued_at=end),
        lambda: JobRun.objects.filter(id=due.id).update(status=RunStatus.SUCCEEDED, finished_at=end),
    ]
    for n, step in enumerate(steps, start=1):
        sim._later(timedelta(minutes=30 * n), step)
    left, took = _timed(lambda: sim._settle(end))
    assert left == ""
    # It waited for the last step (1.2 real s in), though each came within its patience.
    assert not sim.pending
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
    assert took >= 1.0
    assert len(said) == 1 and said[0].startswith("settled at ")


def test_a_window_that_cannot_settle_says_what_was_left(simulation):
    sim, said = simulation
    end = sim.clock.now() - timedelta(minutes=1)
    # Due and never enqueued (no scheduler), and running with no worker: nothing moves.
    due = _run("sim-b", end - timedelta(minutes=2), RunStatus.SCHEDULED)
    running = _run("sim-a", end - timedelta(minutes=1), RunStatus.RUNNING, enqueued_at=end)
    left, took = _timed(lambda: sim._settle(end))
    assert left == (
        f"2 runs of the window left (1 sim-b scheduled, 1 sim-a running; first ids {due.id}, {running.id}); "
        "no scheduler pass at or after the end (none at all); 0 tasks in django-q2's queue"
    )
    assert PATIENCE <= took < 3 * PATIENCE
    assert said == []


def test_a_stop_that_cannot_settle_says_why_for_the_report(simulation):
    sim, said = simulation
    # A run of the window's last tick, due and never enqueued: the scheduler passed before it.
    due = _run("sim-b", PLAN.end, RunStatus.SCHEDULED)
    _passed(PLAN.end - timedelta(minutes=1))
    settled, unsettled = sim._stop()
    assert settled is False
    why = (
        f"1 runs of the window left (1 sim-b scheduled; first ids {due.id}); "
        f"no scheduler pass at or after the end (the last at {PLAN.end - timedelta(minutes=1):%Y-%m-%d %H:%M:%S}); "
        "0 tasks in django-q2's queue"
    )
    # Nothing is live (enqueued or running), so the drain that follows has nothing to wait for.
    assert unsettled == f"the window's runs and sends did not settle after its end: {why}"
    assert said[-1] == unsettled
    assert said[-2].startswith("stopped at ")
