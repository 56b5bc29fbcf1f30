"""The job runs admin shows each run's fencing epoch (the primary's timeline when it
started) in the list and on the run's page, and each event's: a run whose attempts carry
two epochs was cut off by a failover and started again (docs/failover.md)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from scheduling.models import JobRun, JobRunEvent, RunStatus, Trigger
from tests.admin_pages import ADMIN_PAGES
from tests.engine import T0

pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

EPOCH = 2**40


@pytest.fixture
def cut_off_run():
    """A run started under epoch 1, cut off by a failover, and started again under epoch 2."""
    run = JobRun.objects.create(
        job_name="hourly-report",
        scheduled_for=T0,
        status=RunStatus.RUNNING,
        trigger=Trigger.CRON,
        due_at=T0,
        created_at=T0,
        started_at=T0 + timedelta(minutes=5),
        attempts=2,
        fence=2 * EPOCH + 3,
    )
    for attempt, fence in ((1, 1 * EPOCH + 41), (2, 2 * EPOCH + 3)):
        JobRunEvent.objects.create(
            run=run, at=T0 + timedelta(minutes=attempt), kind="started", attempt=attempt, fence=fence
        )
    return run


def test_the_runs_page_shows_each_attempts_epoch(admin_client, cut_off_run):
    page = admin_client.get(reverse("admin:scheduling_jobrun_change", args=[cut_off_run.id])).content.decode()

    epochs = re.findall(r'<td class="field-epoch">\s*<p>([^<]*)</p>', page)
    assert epochs == ["1", "2"], epochs
