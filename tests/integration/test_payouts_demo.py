"""The demo's job step (``make demo-jobs``) on seeded data: each job runs through its
claim and demo_summary reports what each did."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from carts.models import Cart
from orders.models import Order, OrderStatus
from payouts.models import Payout

SEEDED_UNTIL = datetime(2027, 3, 31, 12, 0, tzinfo=UTC)  # a Wednesday noon: every zone is open
NOW = SEEDED_UNTIL + timedelta(minutes=20)
CLEAN_TICK = NOW.replace(hour=2, minute=0)  # the latest tick of clean-carts (0 2 * * *)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_demo_job_step_pays_cleans_and_cancels_and_the_summary_says_so(clocks):
    clocks(NOW)  # the cancellation asks the database for the time
    call_command(
        "seed_demo", "--restaurants", "6", "--weeks", "3", "--now", SEEDED_UNTIL.isoformat(), stdout=StringIO()
    )
    unanswered = Order.objects.filter(status=OrderStatus.PLACED).count()
    stale_carts = Cart.objects.filter(updated_at__lt=CLEAN_TICK - timedelta(days=7)).count()
    assert unanswered > 0 and stale_carts > 0

    run("catch_up_payouts")
    # As make demo-jobs does: each job's latest tick at or before now.
    run("run_job", "clean-carts", "--sync")
    run("run_job", "cancel-stale-orders", "--sync")

    jobs = json.loads(run("demo_summary", "--json"))["jobs"]
    latest = jobs["latest_runs"]
    assert {name: r["status"] for name, r in latest.items()} == {
        "weekly-payouts": "succeeded",
        "clean-carts": "succeeded",
        "cancel-stale-orders": "succeeded",
    }
    assert latest["weekly-payouts"]["result"]["payouts_written"] == Payout.objects.count() > 0
    assert latest["clean-carts"]["result"]["deleted_carts"] == stale_carts
    assert latest["cancel-stale-orders"]["result"]["cancelled"] == unanswered
    assert jobs["stale_order_cancellation"]["cancelled_not_accepted_in_time"] == unanswered
    assert len(jobs["payouts_by_week"]) == Payout.objects.count()

    text = run("demo_summary")
    assert "What the jobs did" in text
    assert f"deleted {stale_carts} carts" in text
    assert "Net payouts by restaurant and business week" in text
