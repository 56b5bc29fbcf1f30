"""``manage.py catch_up_payouts``: a manual weekly-payouts run through the normal claim,
idempotent, restricted when asked, and refusing bad input with nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError

from orders.models import OrderStatus, Restaurant
from orders.services import restaurant_deactivate
from payouts.management.commands import catch_up_payouts
from payouts.models import Payout
from scheduling.models import JobRun, RunStatus

ONBOARDED = datetime(2027, 3, 1, 4, 0, tzinfo=UTC)  # Monday 09:30 in Kolkata
AS_OF = datetime(2027, 3, 21, 20, 30, tzinfo=UTC)  # three Kolkata weeks are finished
NOW = AS_OF + timedelta(days=2)


@pytest.fixture
def restaurants(restaurant_factory: Any, order_factory: Any) -> list[Restaurant]:
    made = [
        restaurant_factory(name=name, timezone="Asia/Kolkata", onboarded_at=ONBOARDED)
        for name in ("Dosa Darbar", "Chaat Corner", "Tandoor Tales")
    ]
    for n, restaurant in enumerate(made):
        order_factory(
            OrderStatus.DELIVERED,
            restaurant=restaurant,
            total=Decimal(f"1{n}.00"),
            placed_at=ONBOARDED + timedelta(hours=2),
        )
    return made


def catch_up(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    with time_machine.travel(NOW, tick=False):
        call_command("catch_up_payouts", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_it_pays_every_unpaid_week_through_a_manual_run_and_prints_them(restaurants):
    out, _ = catch_up("--as-of", AS_OF.isoformat())
    run = JobRun.objects.get(job_name="weekly-payouts")
    assert (run.trigger, run.subject, run.scheduled_for, run.status) == ("manual", "", AS_OF, RunStatus.SUCCEEDED)
    assert Payout.objects.filter(job_run=run).count() == 9
    assert "week of 2027-03-01 (local Monday)" in out
    assert "week of 2027-03-15 (local Monday)" in out
    assert "Dosa Darbar" in out and "gross        10.00" in out
    assert "paid 9 payouts (3 restaurants, 3 weeks)" in out


@pytest.mark.django_db
def test_the_same_catch_up_twice_is_claimed_once_and_pays_nothing_the_second_time(restaurants):
    catch_up("--as-of", AS_OF.isoformat())
    out, _ = catch_up("--as-of", AS_OF.isoformat())
    assert "was already claimed" in out and "paid nothing" in out
    assert JobRun.objects.filter(job_name="weekly-payouts").count() == 1
    assert Payout.objects.count() == 9


@pytest.mark.django_db
def test_a_later_catch_up_pays_only_what_is_still_unpaid(restaurants):
    catch_up("--as-of", AS_OF.isoformat())
    out, _ = catch_up("--as-of", (AS_OF + timedelta(hours=1)).isoformat())
    assert "paid nothing: every finished week was already paid" in out
    assert Payout.objects.count() == 9


@pytest.mark.django_db
def test_it_can_be_restricted_to_some_restaurants(restaurants):
    first, second, third = restaurants
    catch_up("--as-of", AS_OF.isoformat(), "--restaurant", str(second.pk), str(first.pk))
    run = JobRun.objects.get(job_name="weekly-payouts")
    assert run.subject == f"restaurants:{first.pk}-{second.pk}"
    assert set(Payout.objects.values_list("restaurant_id", flat=True)) == {first.pk, second.pk}

    # The same restriction in another order is the same claim; the rest is a new one.
    out, _ = catch_up("--as-of", AS_OF.isoformat(), "--restaurant", str(first.pk), str(second.pk))
    assert "already claimed" in out
    catch_up("--as-of", AS_OF.isoformat())
    assert Payout.objects.filter(restaurant=third).count() == 3
    assert Payout.objects.count() == 9


@pytest.mark.django_db
def test_a_dry_run_shows_what_would_be_paid_and_writes_nothing(restaurants):
    out, _ = catch_up("--as-of", AS_OF.isoformat(), "--dry-run")
    assert out.startswith(f"dry run as of {AS_OF.isoformat()}: 9 payouts would be written\n")
    assert out.rstrip().endswith("nothing written (dry run)")
    assert not Payout.objects.exists()
    assert not JobRun.objects.filter(job_name="weekly-payouts").exists()


@pytest.mark.django_db
def test_a_dry_run_prints_the_lines_the_real_run_then_prints(restaurants):
    dry, _ = catch_up("--as-of", AS_OF.isoformat(), "--dry-run")
    real, _ = catch_up("--as-of", AS_OF.isoformat())
    payout_lines = real.splitlines()[1:]  # after the run's own line
    assert payout_lines[-1].startswith("  paid 9 payouts (3 restaurants, 3 weeks): gross 33.00")
    would = [line.replace("  would pay ", "  paid ", 1) for line in dry.splitlines()[1 : len(payout_lines) + 1]]
    assert would == payout_lines
    assert "Dosa Darbar" in dry and "restaurant 1" not in dry


@pytest.mark.django_db
def test_a_dry_run_prints_amounts_with_thousands_separators_as_demo_summary_does(restaurants, order_factory):
    order_factory(
        OrderStatus.DELIVERED,
        restaurant=restaurants[0],
        total=Decimal("12345.67"),
        placed_at=ONBOARDED + timedelta(hours=3),
    )
    dry, _ = catch_up("--as-of", AS_OF.isoformat(), "--dry-run")
    dosa_week_one = next(line for line in dry.splitlines() if "Dosa Darbar" in line and "Asia/Kolkata" in line)
    assert "gross    12,355.67  commission   1,853.35  net    10,502.32" in dosa_week_one, dosa_week_one
    assert "  would pay 9 payouts (3 restaurants, 3 weeks): gross 12,378.67," in dry
    waiting = next(line for line in dry.splitlines() if "Dosa Darbar" in line and "paid through" in line)
    assert waiting.endswith("gross    12,355.67"), waiting


@pytest.mark.django_db
def test_a_dry_run_lists_the_waiting_orders_by_restaurant_name_then_id(restaurants, restaurant_factory, order_factory):
    namesake = restaurant_factory(name="Chaat Corner", timezone="Asia/Kolkata", onboarded_at=ONBOARDED)
    order_factory(OrderStatus.DELIVERED, restaurant=namesake, placed_at=ONBOARDED + timedelta(hours=2))
    dry, _ = catch_up("--as-of", AS_OF.isoformat(), "--dry-run")
    text = dry.split("delivered orders waiting for their payout: 4 restaurants\n", 1)[1].splitlines()[:4]
    assert [line.split(" paid through")[0].strip() for line in text] == [
        "Chaat Corner",
        "Chaat Corner",
        "Dosa Darbar",
        "Tandoor Tales",
    ]
    assert text[0].endswith("gross        11.00") and text[1].endswith("gross        24.50"), text
    out, _ = catch_up("--as-of", AS_OF.isoformat(), "--dry-run", "--json")
    chaat, *_ = restaurants[1:]
    ids = [row["restaurant"] for row in json.loads(out)["waiting"]]
    assert ids == [chaat.pk, namesake.pk, restaurants[0].pk, restaurants[2].pk]


@pytest.mark.django_db
def test_counts_of_one_are_singular(restaurants):
    first = restaurants[0]
    one_week = (ONBOARDED + timedelta(days=7, hours=1)).isoformat()
    dry, _ = catch_up("--as-of", one_week, "--restaurant", str(first.pk), "--dry-run")
    real, _ = catch_up("--as-of", one_week, "--restaurant", str(first.pk))
    assert "dry run as of" in dry and ": 1 payout would be written" in dry
    assert "    1 order   gross" in real
    assert "  paid 1 payout (1 restaurant, 1 week): gross 10.00" in real


@pytest.mark.django_db
def test_json_output_lists_each_payout(restaurants):
    out, _ = catch_up("--as-of", AS_OF.isoformat(), "--json")
    data = json.loads(out)
    assert data["status"] == "succeeded"
    assert len(data["payouts"]) == 9
    assert {p["gross"] for p in data["payouts"]} == {"0.00", "10.00", "11.00", "12.00"}


@pytest.mark.django_db
def test_a_slow_catch_up_shows_its_progress_on_stderr(restaurants, monkeypatch):
    monkeypatch.setattr(catch_up_payouts, "PROGRESS_AFTER_SECONDS", 0)
    _, err = catch_up("--as-of", AS_OF.isoformat())
    assert "paying: 3/3 restaurants (100 %), 9 payouts written" in err


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--restaurant", "999999"], "no restaurant with id 999999"),
        (["--as-of", "2027-03-32T00:00:00Z"], "is not an ISO 8601 date-time"),
        (["--as-of", "last sunday"], "is not an ISO 8601 date-time"),
        (["--as-of", (NOW + timedelta(minutes=1)).isoformat()], "is in the future"),
        (["--as-of", (NOW + timedelta(minutes=1)).isoformat(), "--dry-run"], "is in the future"),
    ],
)
def test_bad_input_is_refused_with_nothing_written(restaurants, args, message):
    with pytest.raises(CommandError, match=message):
        catch_up(*args)
    assert not JobRun.objects.filter(job_name="weekly-payouts").exists()
    assert not Payout.objects.exists()


@pytest.mark.django_db
def test_an_inactive_restaurant_is_paid_up_to_the_week_it_was_deactivated_in(restaurants):
    first = restaurants[0]
    deactivated_at = first.onboarded_at + timedelta(days=8)
    restaurant_deactivate(restaurant_id=first.pk, now=deactivated_at)
    catch_up("--restaurant", str(first.pk))
    paid = list(Payout.objects.filter(restaurant=first).order_by("period_start"))
    assert paid, "the deactivated restaurant's finished weeks were not paid"
    assert paid[-1].period_start < deactivated_at < paid[-1].period_end


@pytest.mark.django_db(transaction=True)
def test_a_refusal_exits_non_zero_from_the_command_line(restaurants, capsys):
    with time_machine.travel(NOW, tick=False), pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "catch_up_payouts", "--restaurant", "999999"]).execute()
    assert exited.value.code == 1
    assert "no restaurant with id 999999" in capsys.readouterr().err
    assert not JobRun.objects.filter(job_name="weekly-payouts").exists()
