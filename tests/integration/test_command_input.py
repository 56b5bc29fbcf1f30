"""Bad numbers and instants on any command: refused by the one parser the commands
share (``scheduling/management/commands/_base.py``) with a message and nothing written,
never an OverflowError traceback or a nan carried into the work."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError

from orders.models import Order
from payouts.models import Payout
from scheduling.models import JobRun, Schedule

NOW = datetime(2027, 3, 22, 12, 0, tzinfo=UTC)
FAR = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+05:00",  # before year 1 in UTC
    "1969-12-31T23:59:59Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:00:00-05:00",  # after year 9999 in UTC
    "2200-01-01T00:00:00Z",
]


def _nothing_written() -> bool:
    return not (JobRun.objects.exists() or Schedule.objects.exists() or Payout.objects.exists())


@pytest.mark.django_db
@pytest.mark.parametrize("instant", FAR)
@pytest.mark.parametrize(
    "command",
    [
        ["tick", "--now"],
        ["check_runs", "--now"],
        ["run_job", "weekly-payouts", "--scheduled-for"],
        ["run_job", "weekly-payouts", "--sync", "--scheduled-for"],
        ["catch_up_payouts", "--as-of"],
        ["catch_up_payouts", "--dry-run", "--as-of"],
        ["explain_cron", "30 20 * * 0", "--from"],
        ["seed_demo", "--now"],
        ["simulate", "--start"],
    ],
)
def test_an_instant_outside_the_sane_range_is_refused_with_a_message(command, instant):
    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError, match="is outside the instants"):
        call_command(*command, instant, stdout=StringIO(), stderr=StringIO())
    assert _nothing_written()
    assert not Order.objects.exists()


@pytest.mark.django_db
def test_the_edges_of_the_range_are_named():
    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError) as refused:
        call_command("check_runs", "--now", "0001-01-01T00:00:00Z", stdout=StringIO())
    assert str(refused.value) == (
        "--now: '0001-01-01T00:00:00Z' is outside the instants this application handles (1970-01-01 to 2199-12-31, UTC)"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity"])
@pytest.mark.parametrize(
    "command",
    [
        ["simulate_orders", "--per-minute"],
        ["simulate_orders", "--minutes"],
        ["simulate_orders", "--accept"],
        ["simulate_orders", "--reject"],
        ["simulate", "--skew"],
        ["simulate", "--speed"],
        ["simulate", "--orders-per-minute"],
    ],
)
def test_a_number_option_that_is_not_finite_is_refused_before_anything_is_written(restaurant, command, value):
    with pytest.raises(CommandError, match=f"{command[-1]}: '{value}' is not a finite number"):
        # --option=value, so that argparse does not take "-inf" for an option.
        call_command(*command[:-1], f"{command[-1]}={value}", stdout=StringIO(), stderr=StringIO())
    assert not Order.objects.exists()
    assert _nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--chaos", "3", "--crash-worker"], "--chaos draws its own faults"),
        (["--chaos", "3", "--skew", "30"], "--chaos draws its own faults"),
        (["--chaos", "3", "--servers", "1"], "--chaos needs at least 2 servers"),
    ],
)
def test_chaos_with_faults_of_its_own_or_one_server_is_refused_before_anything_is_written(options, message):
    with pytest.raises(CommandError, match=message):
        call_command("simulate", *options, stdout=StringIO(), stderr=StringIO())
    assert _nothing_written()
