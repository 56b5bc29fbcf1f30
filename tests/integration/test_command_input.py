"""Bad numbers, instants and blank values on any command: refused by the one parser the
commands share (``tiffin/cli.py``) with a message, exit status
1 and nothing written, never an OverflowError traceback, a nan carried into the work, or
an empty value taken for "not given"."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.db import connection

from orders.models import Order
from payouts.models import Payout
from scheduling.models import JobRun, Schedule
from support.processes import PROJECT_DIR
from tiffin.cli import TiffinCommand

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


# Every option of every command that takes a value, a blank one of each kind.
VALUE_OPTIONS = [
    ["tick", "--now"],
    ["check_runs", "--now"],
    ["run_job", "clean-carts", "--scheduled-for"],
    ["run_job", "clean-carts", "--sync", "--scheduled-for"],
    ["run_job"],  # the job's name
    ["catch_up_payouts", "--as-of"],
    ["catch_up_payouts", "--dry-run", "--as-of"],
    ["catch_up_payouts", "--restaurant"],
    ["explain_cron"],  # the expression
    ["explain_cron", "30 20 * * 0", "--tz"],
    ["explain_cron", "30 20 * * 0", "--from"],
    ["explain_cron", "30 20 * * 0", "--count"],
    ["seed_demo", "--now"],
    ["seed_demo", "--restaurants"],
    ["simulate", "--start"],
    ["simulate", "--duration"],
    ["simulate", "--speed"],
    ["simulate", "--crash-worker"],
    ["simulate", "--log-dir"],
    ["simulate_orders", "--minutes"],
    ["simulate_orders", "--seed"],
    ["simulate_orders", "--until"],
]


@pytest.mark.django_db
@pytest.mark.parametrize("blank", ["", "  ", "\t"])
@pytest.mark.parametrize("command", VALUE_OPTIONS, ids=" ".join)
def test_an_empty_or_blank_value_is_refused_not_taken_for_the_default(restaurant, command, blank):
    option = command[-1] if command[-1].startswith("--") else {"run_job": "name", "explain_cron": "expr"}[command[0]]
    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError) as refused:
        call_command(*command, blank, stdout=StringIO(), stderr=StringIO())
    assert str(refused.value) == f"{option}: an empty value is not allowed; give a value or leave {option} out"
    assert _nothing_written()
    assert not Order.objects.exists()


@pytest.mark.django_db
def test_a_keyword_given_empty_to_call_command_is_refused_too():
    with pytest.raises(CommandError, match="--as-of: an empty value is not allowed"):
        call_command("catch_up_payouts", as_of="", stdout=StringIO())
    assert _nothing_written()


def _is_ours(app: str) -> bool:
    """An app of this repository, not one installed from a package (Django's, axes')."""
    spec = importlib.util.find_spec(app)
    return spec is not None and "site-packages" not in (spec.origin or "")


def test_every_command_of_the_project_refuses_blank_values():
    ours = [name for name, app in get_commands().items() if _is_ours(app)]
    assert {"tick", "catch_up_payouts", "seed_demo", "simulate"} <= set(ours)
    assert [
        name for name in ours if not isinstance(load_command_class(get_commands()[name], name), TiffinCommand)
    ] == []


@pytest.mark.parametrize(
    "args",
    [
        ["catch_up_payouts", "--as-of", ""],
        ["run_job", "clean-carts", "--scheduled-for", " "],
        ["seed_demo", "--weeks", ""],
    ],
)
def test_on_the_command_line_a_blank_value_exits_1_before_the_database_is_opened(tmp_path: Path, args):
    database = tmp_path / "untouched.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "DEBUG": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith("an empty value is not allowed; give a value or leave " + f"{args[-2]} out")
    assert not database.exists()


@pytest.mark.django_db
def test_check_runs_refuses_a_now_in_the_future_as_tick_does():
    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError, match="is in the future"):
        call_command("check_runs", "--now", "2030-01-01T00:00:00Z", stdout=StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--chaos", "3", "--crash-worker"], "--chaos draws its own faults"),
        (["--chaos", "3", "--skew", "30"], "--chaos draws its own faults"),
        (["--chaos", "3", "--servers", "1"], "--chaos needs at least 2 servers"),
        (["--chaos", "3", "--chaos-rate", "0"], "--chaos-rate 0: give more than 0"),
        (["--chaos", "3", "--chaos-rate", "500"], "at most 120 faults per simulated hour"),
        (["--chaos-rate", "30"], "--chaos-rate goes with --chaos SEED"),
        (["--leader-kills", "1"], "--leader-kills goes with --chaos SEED"),
        (["--chaos", "3", "--leader-kills", "-1"], "--leader-kills -1: give 0 or more, on PostgreSQL"),
    ],
)
def test_chaos_with_faults_of_its_own_or_one_server_is_refused_before_anything_is_written(options, message):
    with pytest.raises(CommandError, match=message):
        call_command("simulate", *options, stdout=StringIO(), stderr=StringIO())
    assert _nothing_written()


@pytest.mark.django_db
def test_the_pooler_without_postgresql_is_refused_before_anything_is_written():
    if connection.vendor == "postgresql":
        pytest.skip("on PostgreSQL --pooler runs (tests/scenarios/test_chaos.py)")
    with pytest.raises(CommandError, match="--pooler puts the processes behind PgBouncer: it needs a postgres://"):
        call_command("simulate", "--chaos", "3", "--pooler", stdout=StringIO(), stderr=StringIO())
    assert _nothing_written()
