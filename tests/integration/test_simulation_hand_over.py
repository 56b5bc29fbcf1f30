"""After ``simulate``, ``end_simulation`` (run by ``make up``) hands the database over to
servers on the real clock: the probe jobs go, and the schedules start afresh from now,
so the simulated past is not taken for an outage: a scheduler pass at the real present
claims nothing from the gap, and the missed-run check finds nothing to alert."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command

from operations.alerts import alerts_open_count, problems_alert
from operations.monitoring import runs_check
from scheduling.dispatch import tick_pass
from scheduling.models import JobRun, ProblemKind, RunAlert, RunStatus, Schedule, SchedulerNode, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from scheduling.selectors import schedule_next_fire
from simulation.services import PROBE_JOBS, simulation_hand_over
from tests.engine import T0, make_job

pytestmark = pytest.mark.django_db

FIVE_MINUTES = make_job("every-five", cron="*/5 * * * *")
PROBES = [make_job(name, cron="* * * * *") for name in PROBE_JOBS]
SIMULATED_END = T0 + timedelta(hours=2)
REAL_NOW = T0 + timedelta(days=3, minutes=7)


@pytest.fixture
def simulated():
    """What a two-hour simulation leaves: its jobs' schedules and runs (probes included,
    one left enqueued), and its scheduler node's last pass at the simulated end."""
    with registry.replaced(FIVE_MINUTES, *PROBES):
        schedules_register(now=T0)
    for job in (FIVE_MINUTES, *PROBES):
        for minutes in range(0, 120, 5):
            tick = T0 + timedelta(minutes=minutes)
            times = {"scheduled_for": tick, "due_at": tick, "created_at": tick, "finished_at": tick}
            JobRun.objects.create(job_name=job.name, status=RunStatus.SUCCEEDED, trigger=Trigger.CRON, **times)
    JobRun.objects.filter(job_name=PROBE_JOBS[1], scheduled_for=SIMULATED_END - timedelta(minutes=5)).update(
        status=RunStatus.ENQUEUED, enqueued_at=SIMULATED_END - timedelta(minutes=5)
    )
    SchedulerNode.objects.create(name="sim:1", started_at=T0, last_pass_at=SIMULATED_END)
    # An alert the simulated check raised, about a tick of a probe job.
    RunAlert.objects.create(
        job_name=PROBE_JOBS[1], scheduled_for=T0, kind=ProblemKind.NOT_STARTED, alerted_at=SIMULATED_END
    )


def test_the_hand_over_leaves_nothing_to_claim_or_alert_at_the_real_present(simulated):
    hand_over = simulation_hand_over(now=REAL_NOW)
    assert hand_over is not None
    assert hand_over.line() == (
        "The simulated history ends at Mon 01 Mar 14:00 UTC; the schedules start afresh from now "
        "(Thu 04 Mar 12:07 UTC), so the time between is not taken for an outage."
    )
    assert not Schedule.objects.filter(job_name__in=PROBE_JOBS).exists()
    assert not JobRun.objects.filter(job_name__in=PROBE_JOBS).exists()
    assert alerts_open_count() == 0
    with registry.replaced(FIVE_MINUTES):
        report = tick_pass(now=REAL_NOW)
        assert report.claimed == []  # nothing from the three days between
        later = REAL_NOW + timedelta(minutes=20)
        tick_pass(now=later)  # the ticks after the hand-over are claimed as usual
        JobRun.objects.filter(scheduled_for__gt=REAL_NOW).update(status=RunStatus.SUCCEEDED, finished_at=later)
        problems = runs_check(now=later)
        assert problems_alert(problems=problems, now=later) == []
    assert problems == []
    assert RunAlert.objects.filter(alerted_at__gt=REAL_NOW).count() == 0
    claimed = JobRun.objects.filter(job_name=FIVE_MINUTES.name, scheduled_for__gt=SIMULATED_END)
    assert [run.scheduled_for - REAL_NOW for run in claimed.order_by("scheduled_for")] == [
        timedelta(minutes=m) for m in (3, 8, 13, 18)
    ]


def test_a_second_hand_over_or_one_without_a_simulation_does_nothing(simulated):
    out = StringIO()
    with time_machine.travel(REAL_NOW, tick=False):
        call_command("end_simulation", stdout=out)
        first_seen = Schedule.objects.get(job_name=FIVE_MINUTES.name).first_seen_at
        again = StringIO()
        call_command("end_simulation", stdout=again)
    assert out.getvalue().startswith("The simulated history ends at Mon 01 Mar 14:00 UTC")
    assert again.getvalue() == ""
    assert first_seen == REAL_NOW


def test_a_schedule_no_code_declares_has_no_next_fire_time(simulated):
    with registry.replaced(FIVE_MINUTES):
        fires = {s.job_name: schedule_next_fire(schedule=s, now=REAL_NOW) for s in Schedule.objects.all()}
    assert fires == {FIVE_MINUTES.name: REAL_NOW + timedelta(minutes=3), PROBE_JOBS[0]: None, PROBE_JOBS[1]: None}


def test_the_runs_a_simulation_left_in_flight_are_skipped_not_run_days_late(simulated):
    """A delayed run due after the simulated end (an order's cancellation) and a retry:
    both would run at the real present, days late; the hand-over retires them instead."""
    due = {"created_at": SIMULATED_END, "trigger": Trigger.DELAYED}
    pending = JobRun.objects.create(
        job_name="cancel-one", subject="order:7", scheduled_for=SIMULATED_END + timedelta(minutes=3),
        due_at=SIMULATED_END + timedelta(minutes=3), status=RunStatus.SCHEDULED, **due,
    )  # fmt: skip
    retrying = JobRun.objects.create(
        job_name=FIVE_MINUTES.name, scheduled_for=SIMULATED_END - timedelta(minutes=1), due_at=SIMULATED_END,
        status=RunStatus.FAILED, attempts=1, created_at=SIMULATED_END, trigger=Trigger.CRON,
    )  # fmt: skip
    hand_over = simulation_hand_over(now=REAL_NOW)
    assert hand_over is not None and hand_over.retired_runs == 2
    assert "2 runs the simulation left unfinished are skipped (simulation ended), not run late." in hand_over.line()
    for run in (pending, retrying):
        run.refresh_from_db()
        assert (run.status, run.skip_reason, run.finished_at) == (RunStatus.SKIPPED, "simulation_ended", REAL_NOW)
        assert run.events.filter(kind="skipped").count() == 1
    # A retired run is not a problem, even for a check whose window holds it.
    assert runs_check(now=SIMULATED_END + timedelta(minutes=10)) == []
