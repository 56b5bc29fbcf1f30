"""Issue 30, hole 5: a backfill that blocks the real run.

``weekly-payouts`` keeps every run, so the claim guard horizon did not bound it: an admin
backfill from 2007-12-20 claimed 989 payout runs, a catch-up was then refused (waiting
behind the oldest, overlap=queue), and the next scheduled tick would have queued behind
all of them; 1970 ticks were accepted, and 0001-01-01 was an HTTP 500 (OverflowError).
Now: the payout job is never backfilled (its scheduled run pays every finished week;
catch_up_payouts pays now), every backfill is bounded in ticks and days, no logical time
is before 2000 or, for the payout job, before the first restaurant's onboarding, and the
admin form says so and shows its errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from payouts.models import PAYOUT_JOB
from scheduling.dispatch import tick_pass
from scheduling.execution import runs_start
from scheduling.models import JobRun, RunStatus, Schedule, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from scheduling.services import SchedulingError, run_claim_manual, runs_backfill
from tests.admin_pages import ADMIN_PAGES
from tests.engine import make_job

# The admin tests read admin pages (admin_pages, tests/conftest.py).
pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

# Sunday 2027-02-28 20:31 UTC: a minute after a payout tick.
NOW = datetime(2027, 2, 28, 20, 31, tzinfo=UTC)
TICK = datetime(2027, 2, 28, 20, 30, tzinfo=UTC)
KEEPS_EVERYTHING = make_job("yearly-audit", cron="0 3 * * *", retention_days=None)


@pytest.fixture(autouse=True)
def at_now():
    """Every test happens a minute after a payout tick (sessions, too, are made then)."""
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def operator(at_now):
    user = User.objects.create_user("operator", is_staff=True)
    codenames = ["view_schedule", "view_jobrun", "run_schedule"]
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def payouts_registered(restaurant_factory):
    """The project's jobs, registered just before the tick (the one tick due), and a
    restaurant onboarded in 2026."""
    restaurant_factory(onboarded_at=datetime(2026, 1, 5, tzinfo=UTC))
    schedules_register(now=TICK - timedelta(minutes=1))


def _backfill_post(client, job_name, start, end):
    pk = Schedule.objects.get(job_name=job_name).pk
    url = reverse("admin:scheduling_schedule_changelist")
    data = {"action": "backfill", "_selected_action": [str(pk)], "apply": "1", "start": start, "end": end}
    return client.post(url, data)


def _messages(response):
    return [str(m) for m in response.wsgi_request._messages]


def test_the_admin_refuses_a_backfill_from_year_one_with_a_form_error_not_a_500(operator):
    with registry.replaced(KEEPS_EVERYTHING):
        schedules_register(now=NOW - timedelta(days=2))
        response = _backfill_post(operator, KEEPS_EVERYTHING.name, "0001-01-01 00:00", "0001-01-02 00:00")
    assert response.status_code == 200
    assert "Give an instant from 2000-01-01 on." in response.content.decode()
    assert not JobRun.objects.exists()


def test_the_service_refuses_year_one_and_1970_with_a_message(db):
    with registry.replaced(KEEPS_EVERYTHING):
        for start in (datetime(1, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC)):
            with pytest.raises(SchedulingError, match="cannot start before 2000-01-01"):
                runs_backfill(
                    job_name=KEEPS_EVERYTHING.name, start=start, end=start + timedelta(days=1), actor="op", now=NOW
                )
            with pytest.raises(SchedulingError, match="before 2000-01-01, the earliest logical time"):
                run_claim_manual(job_name=KEEPS_EVERYTHING.name, scheduled_for=start + timedelta(hours=3), now=NOW)
    assert not JobRun.objects.exists()


def test_a_backfill_spans_at_most_31_days_and_the_form_says_so(operator):
    with registry.replaced(KEEPS_EVERYTHING):
        schedules_register(now=NOW - timedelta(days=2))
        form = operator.post(
            reverse("admin:scheduling_schedule_changelist"),
            {"action": "backfill", "_selected_action": [str(Schedule.objects.get().pk)]},
        )
        assert "At most 31 days and 1000 ticks per backfill" in form.content.decode()
        response = _backfill_post(operator, KEEPS_EVERYTHING.name, "2026-01-01 00:00", "2026-03-01 00:00")
        assert "A backfill spans at most 31 days: split the range." in response.content.decode()
        with pytest.raises(SchedulingError, match="spans at most 31 days"):
            runs_backfill(
                job_name=KEEPS_EVERYTHING.name,
                start=datetime(2007, 12, 20, tzinfo=UTC),
                end=NOW,
                actor="op",
                now=NOW,
            )
    assert not JobRun.objects.exists()


def test_payouts_are_never_backfilled_and_the_scheduled_tick_is_not_blocked(operator, payouts_registered):
    # The backfill, through the admin: refused by the form (it spans 19 years).
    response = _backfill_post(operator, PAYOUT_JOB, "2007-12-20 00:00", "2027-02-28 20:31")
    assert response.status_code == 200
    assert "A backfill spans at most 31 days: split the range." in response.content.decode()
    # Last week's: refused by the service, naming what to do instead.
    response = _backfill_post(operator, PAYOUT_JOB, "2027-02-21 00:00", "2027-02-28 20:31")
    refusals = [m for m in _messages(response) if "never backfilled" in m]
    assert refusals and "catch_up_payouts" in refusals[0]
    with pytest.raises(SchedulingError, match="never backfilled"):
        runs_backfill(job_name=PAYOUT_JOB, start=TICK - timedelta(days=7), end=TICK, actor="op", now=NOW)
    assert not JobRun.objects.filter(job_name=PAYOUT_JOB).exists()
    # The scheduled tick is claimed and starts at once: nothing waits in front of it.
    report = tick_pass(now=NOW)
    tick = JobRun.objects.get(job_name=PAYOUT_JOB, trigger=Trigger.CRON, scheduled_for=TICK)
    assert (PAYOUT_JOB, TICK) in {(claimed.job_name, claimed.scheduled_for) for claimed in report.claimed}
    started = runs_start(job=registry.get(PAYOUT_JOB), run_ids=[tick.id], now=NOW, worker="w")
    assert [ctx.run_id for ctx in started] == [tick.id]
    tick.refresh_from_db()
    assert tick.status == RunStatus.RUNNING


def test_payout_runs_before_the_first_onboarding_are_refused(payouts_registered):
    for argv in (
        ("run_job", PAYOUT_JOB, "--scheduled-for", "1970-01-04T20:30:00Z"),
        ("run_job", PAYOUT_JOB, "--scheduled-for", "2025-12-28T20:30:00Z"),
        ("catch_up_payouts", "--as-of", "2025-12-31T00:00:00Z"),
    ):
        with pytest.raises(CommandError, match="before"):
            call_command(*argv, stdout=StringIO(), stderr=StringIO())
    assert not JobRun.objects.filter(job_name=PAYOUT_JOB).exists()
    # From the first onboarding on, a manual run is claimed as before.
    run = run_claim_manual(job_name=PAYOUT_JOB, scheduled_for=datetime(2026, 1, 11, 20, 30, tzinfo=UTC), now=NOW)
    assert run is not None and run.trigger == Trigger.MANUAL
