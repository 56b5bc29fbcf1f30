"""``manage.py explain_cron``: the reading, warnings, fire times, JSON, and clear failures."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError

from explainer.management.commands.explain_cron import Command


def run(*args: str) -> str:
    out = StringIO()
    call_command("explain_cron", *args, stdout=out)
    return out.getvalue()


def test_it_prints_fields_dst_rule_warnings_and_fire_times_in_utc_and_the_zone():
    text = run("30 1 * * *", "--tz", "Europe/London", "--from", "2027-10-30T12:00Z", "--count", "2")
    assert "At 01:30, every day (Europe/London time)" in text
    assert "  minute        30  minute 30" in text
    assert "DST: Fixed local time" in text
    assert "! on 2027-10-31 the clocks go back and local 01:30 happens twice" in text
    assert "Next 2 fire time(s):" in text
    assert "2027-10-31 00:30 UTC   2027-10-31 01:30 BST (Sun)" in text
    assert "2027-11-01 01:30 UTC   2027-11-01 01:30 GMT (Mon)" in text


def test_json_output_is_the_explanation_as_a_dict():
    data = json.loads(run("0 0 13 * 5", "--from", "2027-01-01T00:00:00+00:00", "--count", "3", "--json"))
    assert [n["utc"] for n in data["next"]] == [
        "2027-01-08T00:00:00+00:00",
        "2027-01-13T00:00:00+00:00",
        "2027-01-15T00:00:00+00:00",
    ]
    assert [w["code"] for w in data["warnings"]] == ["day-or"]
    assert data["timezone"] == "UTC"


def test_from_defaults_to_the_clock():
    with time_machine.travel(datetime(2027, 3, 1, 10, 7, tzinfo=UTC), tick=False):
        data = json.loads(run("*/15 * * * *", "--count", "1", "--json"))
    assert data["next"][0]["utc"] == "2027-03-01T10:15:00+00:00"


def test_an_unquoted_expression_is_joined_back_together():
    assert "At 02:00, every day" in run("0", "2", "*", "*", "*", "--from", "2027-01-01")


def test_a_never_firing_expression_is_explained_not_an_error():
    text = run("0 0 30 2 *", "--from", "2027-01-01T00:00Z")
    assert "never fires: there is no day 30 in February" in text
    assert "Next 0 fire time(s):\n  none" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0 25 * * *"], "hour field '25': 25 is out of range 0-23"),
        (["0 0 12 * * ?"], "seconds-first dialect such as Quartz"),
        (["@reboot"], "@reboot"),
        (["0 2 * * *", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["0 2 * * *", "--from", "next tuesday"], "--from: 'next tuesday' is not an ISO 8601 date-time"),
        (["0 2 * * *", "--count", "0"], "--count must be between 1 and 100"),
        (["0 2 * * *", "--count", "many"], "invalid int value"),
        (["0", "25", "*", "*", "*"], "quote the whole expression"),
    ],
)
def test_bad_input_is_a_command_error_with_a_clear_message(args, message):
    with pytest.raises(CommandError) as caught:
        run(*args)
    assert message in str(caught.value)


def test_a_bad_expression_exits_non_zero_with_the_message_on_stderr(capsys):
    with pytest.raises(SystemExit) as caught:
        Command().run_from_argv(["manage.py", "explain_cron", "0 0 32 * *"])
    assert caught.value.code == 1
    assert "day-of-month field '32': 32 is out of range 1-31" in capsys.readouterr().err
