"""demo_summary's payout table says why a week has no payout: before the restaurant's
onboarding, not over yet, or over and waiting for a catch-up (which would pay it)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command

from demo.management.commands.demo_summary import BEFORE_ONBOARDING, NOT_OVER, UNPAID, _describe, week_unpaid_reason
from scheduling.execution import runs_execute
from scheduling.services import run_claim_manual

pytestmark = pytest.mark.django_db

# Monday 15 March 2027, 03:00 UTC: the week of 8 March is over in Kolkata (Sunday 18:30
# UTC) and London (00:00 UTC), not yet in New York (04:00 UTC, daylight time).
PAID_AT = datetime(2027, 3, 15, 3, 0, tzinfo=UTC)
NOW = PAID_AT + timedelta(hours=2)  # the New York week is over, and not paid


def test_a_week_over_but_not_paid_is_told_apart_from_one_before_onboarding(
    restaurant_factory: Any, clocks: Any
) -> None:
    restaurant_factory(name="Dosa Darbar", timezone="Asia/Kolkata", onboarded_at=datetime(2027, 3, 1, 4, tzinfo=UTC))
    restaurant_factory(name="Camden Kitchen", timezone="Europe/London", onboarded_at=datetime(2027, 3, 9, tzinfo=UTC))
    restaurant_factory(name="Bowery Bowls", timezone="America/New_York", onboarded_at=datetime(2027, 3, 2, tzinfo=UTC))
    with time_machine.travel(PAID_AT + timedelta(minutes=1), tick=False):
        run = run_claim_manual(job_name="weekly-payouts", scheduled_for=PAID_AT, now=PAID_AT, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")
    clocks(NOW)
    out = StringIO()
    call_command("demo_summary", stdout=out)
    rows = {line.split()[0]: line.split()[-2:] for line in out.getvalue().splitlines() if "/" in line}
    assert rows["Dosa"] == ["0.00", "0.00"]  # weeks of 1 and 8 March
    assert rows["Camden"] == [BEFORE_ONBOARDING, "0.00"]
    assert rows["Bowery"] == ["0.00", UNPAID]
    assert "'unpaid' over but not paid yet (a catch-up pays it" in out.getvalue()


def test_a_week_not_over_yet_is_open() -> None:
    onboarded = datetime(2027, 3, 2, tzinfo=UTC)
    reason = week_unpaid_reason(
        monday=date(2027, 3, 8), timezone="America/New_York", onboarded_at=onboarded, now=PAID_AT
    )
    assert reason == NOT_OVER
    reason = week_unpaid_reason(monday=date(2027, 3, 8), timezone="America/New_York", onboarded_at=onboarded, now=NOW)
    assert reason == UNPAID


def test_a_payout_run_retried_after_a_crash_is_described_by_all_its_payouts():
    """The amounts of a run's result are of every payout it wrote, by every attempt; the
    count beside them is too, with the last attempt's share (the demo's crash leaves one)."""
    result: dict[str, Any] = {"payouts_written": 60, "payouts_of_run": 72, "restaurants": 12}
    result |= {"gross": "356021.85", "commission": "68710.69", "net": "287311.16"}
    assert _describe("weekly-payouts", result) == (
        "72 payouts (60 by its last attempt) written for 12 restaurants "
        "(gross 356,021.85, commission 68,710.69, net 287,311.16)"
    )
