"""Manual runs that cannot run now (``catch_up_payouts``, ``run_job --sync``) say which
run they wait behind and why it has not moved, exit non-zero, and claim nothing, so the
same command works once the way is clear."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from orders.models import OrderStatus
from payouts.models import PAYOUT_JOB, Payout
from scheduling.dispatch import runs_claim, tick_pass
from scheduling.models import JobRun, Overlap, RunStatus, Trigger
from scheduling.policies import PlannedTick
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, drain_queue, make_job

ONBOARDED = datetime(2027, 3, 1, 4, 0, tzinfo=UTC)  # Monday 09:30 in Kolkata
SUNDAY_TICK = datetime(2027, 3, 21, 20, 30, tzinfo=UTC)
NEXT_SUNDAY_TICK = SUNDAY_TICK + timedelta(days=7)


def _call(*args: str, at: datetime) -> str:
    out = StringIO()
    with time_machine.travel(at, tick=False):
        call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _claim_cron_tick(job_name: str, tick: datetime) -> JobRun:
    """What a scheduler pass does at the tick: claim it and enqueue its task."""
    with transaction.atomic():
        (run,) = runs_claim(
            job=registry.get(job_name), plan=[PlannedTick(tick, RunStatus.ENQUEUED)], trigger=Trigger.CRON, now=tick
        )
    return run


def _left_running(job_name: str, tick: datetime, *, heartbeat_at: datetime, worker: str = "web-1:4242") -> JobRun:
    """A run whose worker died mid-run: still ``running``, its heartbeat stopped."""
    return JobRun.objects.create(
        job_name=job_name,
        scheduled_for=tick,
        due_at=tick,
        status=RunStatus.RUNNING,
        trigger=Trigger.CRON,
        attempts=1,
        fence=1,
        created_at=tick,
        enqueued_at=tick,
        started_at=tick,
        heartbeat_at=heartbeat_at,
        worker=worker,
    )


@pytest.fixture
def restaurants(restaurant_factory: Any, order_factory: Any) -> list[Any]:
    made = [restaurant_factory(name=name, onboarded_at=ONBOARDED) for name in ("Dosa Darbar", "Chaat Corner")]
    for restaurant in made:
        order_factory(
            OrderStatus.DELIVERED,
            restaurant=restaurant,
            total=Decimal("10.00"),
            placed_at=ONBOARDED + timedelta(hours=2),
        )
    return made


# --- catch_up_payouts -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_catch_up_behind_a_claimed_tick_no_worker_took_says_so_exits_non_zero_and_claims_nothing(restaurants):
    sunday = _claim_cron_tick(PAYOUT_JOB, SUNDAY_TICK)
    two_hours_later = SUNDAY_TICK + timedelta(hours=2)

    with pytest.raises(CommandError) as refused:
        _call("catch_up_payouts", at=two_hours_later)

    message = str(refused.value)
    assert f"waits behind run {sunday.id} ({PAYOUT_JOB} @ 2027-03-21T20:30:00+00:00, cron)" in message
    assert "enqueued, and no worker has taken it for 7200 s" in message
    assert "Nothing was claimed: run the same command again" in message
    assert list(JobRun.objects.filter(job_name=PAYOUT_JOB).values_list("id", flat=True)) == [sunday.id]
    assert not Payout.objects.exists()

    # Once a worker has run the Sunday tick, the same catch-up runs and exits 0.
    with time_machine.travel(two_hours_later, tick=False):
        drain_queue()
    out = _call("catch_up_payouts", at=two_hours_later + timedelta(minutes=1))
    assert "succeeded" in out and "paid nothing: every finished week was already paid" in out
    manual = JobRun.objects.get(job_name=PAYOUT_JOB, trigger=Trigger.MANUAL)
    assert manual.status == RunStatus.SUCCEEDED
    assert Payout.objects.count() == 6


@pytest.mark.django_db
def test_a_catch_up_that_cannot_run_reports_its_blocker_as_json(restaurants):
    sunday = _claim_cron_tick(PAYOUT_JOB, SUNDAY_TICK)
    out = StringIO()
    with time_machine.travel(SUNDAY_TICK + timedelta(minutes=10), tick=False), pytest.raises(CommandError):
        call_command("catch_up_payouts", "--json", stdout=out, stderr=StringIO())
    data = json.loads(out.getvalue())
    assert (data["ran"], data["claimed"]) == (False, False)
    assert data["waits_behind"] == [
        {
            "run": sunday.id,
            "job": PAYOUT_JOB,
            "subject": "",
            "scheduled_for": "2027-03-21T20:30:00+00:00",
            "trigger": "cron",
            "status": "enqueued",
            "worker": "",
            "seconds_waiting": 600,
            "seconds_silent": None,
        }
    ]


@pytest.mark.django_db
def test_a_catch_up_whose_claim_is_still_waiting_exits_non_zero(restaurants):
    now = SUNDAY_TICK + timedelta(hours=3)
    run = JobRun.objects.create(
        job_name=PAYOUT_JOB,
        scheduled_for=now,
        due_at=now,
        status=RunStatus.ENQUEUED,
        trigger=Trigger.MANUAL,
        created_at=now,
        enqueued_at=now,
    )
    with pytest.raises(CommandError, match=f"already claimed as run {run.id}, which is enqueued.* for 300 s"):
        _call("catch_up_payouts", "--as-of", now.isoformat(), at=now + timedelta(minutes=5))


# --- run_job --sync ---------------------------------------------------------------------


@pytest.mark.django_db
def test_run_job_sync_behind_a_run_a_dead_worker_left_running_says_why_and_a_retry_works(restaurants):
    dead = _left_running(PAYOUT_JOB, SUNDAY_TICK, heartbeat_at=SUNDAY_TICK + timedelta(minutes=1))
    now = NEXT_SUNDAY_TICK + timedelta(minutes=1)

    with pytest.raises(CommandError) as refused:
        _call("run_job", PAYOUT_JOB, "--sync", at=now)

    message = str(refused.value)
    assert f"{PAYOUT_JOB} @ 2027-03-28T20:30:00+00:00 cannot run now" in message
    assert f"waits behind run {dead.id} ({PAYOUT_JOB} @ 2027-03-21T20:30:00+00:00, cron)" in message
    assert "running on web-1:4242 with no heartbeat for 604800 s" in message
    assert "longer than its timeout of 600 s" in message
    assert "Nothing was claimed: run the same command again" in message
    assert list(JobRun.objects.filter(job_name=PAYOUT_JOB).values_list("id", flat=True)) == [dead.id]

    # A scheduler pass abandons the silent run; then the same command runs the tick.
    with registry.replaced(registry.get(PAYOUT_JOB)), time_machine.travel(now, tick=False):
        schedules_register(now=now)
        tick_pass(now=now)
    dead.refresh_from_db()
    assert dead.status == RunStatus.ABANDONED
    out = _call("run_job", PAYOUT_JOB, "--sync", at=now + timedelta(seconds=5))
    assert "ran weekly-payouts @ 2027-03-28T20:30:00+00:00" in out and "succeeded" in out
    assert JobRun.objects.get(job_name=PAYOUT_JOB, trigger=Trigger.MANUAL).status == RunStatus.SUCCEEDED


@pytest.fixture
def forbid_job():
    job = make_job("nightly", cron="0 * * * *", overlap=Overlap.FORBID, timeout_seconds=3600)
    with registry.replaced(job):
        schedules_register(now=T0)
        yield job


@pytest.mark.django_db
def test_run_job_sync_of_a_forbid_job_still_running_is_refused_not_recorded_as_skipped(forbid_job):
    running = _left_running("nightly", T0, heartbeat_at=T0)
    later = T0 + timedelta(hours=1, minutes=1)
    with pytest.raises(CommandError, match=f"waits behind run {running.id} .*running on web-1:4242 for 3660 s"):
        _call("run_job", "nightly", "--sync", at=later)
    assert list(JobRun.objects.values_list("id", flat=True)) == [running.id]

    JobRun.objects.filter(id=running.id).update(status=RunStatus.SUCCEEDED)
    out = _call("run_job", "nightly", "--sync", at=later)
    assert "succeeded" in out


@pytest.mark.django_db
def test_run_job_of_a_tick_already_claimed_but_not_done_exits_non_zero(forbid_job):
    _call("run_job", "nightly", at=T0 + timedelta(hours=1))  # claimed and enqueued; no worker
    with pytest.raises(CommandError, match=r"already claimed as run .*enqueued, and no worker has taken it for 120 s"):
        _call("run_job", "nightly", at=T0 + timedelta(hours=1, minutes=2))
    # Once done, asking again is a harmless no-op.
    JobRun.objects.update(status=RunStatus.SUCCEEDED)
    assert "already claimed" in _call("run_job", "nightly", at=T0 + timedelta(hours=1, minutes=3))
