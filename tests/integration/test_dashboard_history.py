"""The dashboard after a hand-over (``make demo`` then ``make up``): a job's cron runs
from before its schedule was registered afresh are its ticks, drawn and counted by their
outcome, never "manual or backfill runs"; the fitted span reaches back to them."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from operations.timeline import job_timeline, timeline_draw, timeline_fitted_start
from scheduling.models import JobRun, RunStatus, Schedule, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.admin_pages import ADMIN_PAGES
from tests.engine import T0, make_job

# The dashboard test reads an admin page (admin_pages, tests/conftest.py).
pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

EVERY_FIVE = make_job("sweep", cron="*/5 * * * *")
SIMULATED = [T0 + timedelta(minutes=5 * i) for i in range(25)]  # two simulated hours
HANDED_OVER = T0 + timedelta(days=4, hours=1)
NOW = HANDED_OVER + timedelta(minutes=12)


@pytest.fixture(autouse=True)
def handed_over():
    """25 cron runs of a simulated evening, then the schedule registered afresh four days
    later (end_simulation), two ticks claimed since, and one manual run."""
    with registry.replaced(EVERY_FIVE), time_machine.travel(NOW, tick=False):
        schedules_register(now=T0)
        for when in SIMULATED:
            _run(when)
        Schedule.objects.filter(job_name=EVERY_FIVE.name).update(first_seen_at=HANDED_OVER)
        for when in (HANDED_OVER + timedelta(minutes=5), HANDED_OVER + timedelta(minutes=10)):
            _run(when)
        _run(HANDED_OVER + timedelta(minutes=7, seconds=13), trigger=Trigger.MANUAL)
        yield


def _run(when, status=RunStatus.SUCCEEDED, trigger=Trigger.CRON):
    times = {"due_at": when, "created_at": when, "started_at": when + timedelta(seconds=2)}
    return JobRun.objects.create(
        job_name=EVERY_FIVE.name, scheduled_for=when, status=status, trigger=trigger, finished_at=when, **times
    )


def test_cron_runs_from_before_the_registration_are_ticks_and_manual_runs_are_not():
    schedule = Schedule.objects.get(job_name=EVERY_FIVE.name)
    timeline = job_timeline(job=EVERY_FIVE, schedule=schedule, start=NOW - timedelta(days=7), now=NOW)
    claimed_after = [HANDED_OVER + timedelta(minutes=m) for m in (5, 10)]
    assert [tick.scheduled_for for tick in timeline.ticks] == [*SIMULATED, *claimed_after]
    assert {tick.outcome for tick in timeline.ticks} == {RunStatus.SUCCEEDED}  # none missed in the gap
    assert [run.trigger for run in timeline.other_runs] == [Trigger.MANUAL]
    drawing = timeline_draw(timeline)
    assert drawing.counts[RunStatus.SUCCEEDED] == 27
    run_marks = [mark for mark in drawing.marks if mark.css.startswith("run ")]
    assert len(run_marks) == 28  # every run is drawn: 27 on ticks, the manual one beside them


def test_the_fitted_span_reaches_back_to_the_jobs_last_runs():
    schedule = Schedule.objects.get(job_name=EVERY_FIVE.name)
    assert timeline_fitted_start(job=EVERY_FIVE, schedule=schedule, now=NOW) == SIMULATED[0] - timedelta(minutes=1)


def test_the_dashboard_right_after_the_hand_over_shows_the_history():
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling"))
    client = Client()
    client.force_login(user)
    with registry.replaced(EVERY_FIVE), time_machine.travel(NOW, tick=False):
        page = client.get(reverse("admin:scheduling_dashboard")).content.decode()
    start = SIMULATED[0] - timedelta(minutes=1)
    assert f"From {start:%a %d %b %H:%M} UTC to now: 27 ticks · 27 succeeded · 1 manual or backfill run" in page
