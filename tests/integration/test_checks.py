"""The UTC system check: the project refuses to start unless storage and computation are
in UTC with aware datetimes."""

from __future__ import annotations

from django.core import checks
from django.test import override_settings

from tiffin.checks import check_time_zone_is_utc


def ids(errors: list[checks.CheckMessage]) -> list[str]:
    return sorted(str(error.id) for error in errors if str(error.id).startswith("tiffin."))


def test_it_is_silent_with_the_shipped_settings():
    assert check_time_zone_is_utc() == []
    assert ids(checks.run_checks()) == []


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_it_refuses_a_local_time_zone():
    errors = check_time_zone_is_utc()
    assert [error.id for error in errors] == ["tiffin.E001"]
    assert errors[0].level == checks.ERROR
    assert "'Asia/Kolkata'" in errors[0].msg


@override_settings(USE_TZ=False)
def test_it_refuses_naive_datetimes():
    assert [error.id for error in check_time_zone_is_utc()] == ["tiffin.E002"]


@override_settings(TIME_ZONE="Europe/London", USE_TZ=False)
def test_the_registered_check_reports_both_through_run_checks():
    # run_checks is what manage.py and the servers call at start: the check is registered.
    assert ids(checks.run_checks()) == ["tiffin.E001", "tiffin.E002"]
