"""Parsing and validation: what five-field cron means here, and errors that name the field."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from scheduling import cron

T0 = datetime(2027, 1, 1, tzinfo=UTC)


# --- errors name the field --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "field", "message"),
    [
        ("60 * * * *", "minute", "minute field '60': 60 is out of range 0-59"),
        ("0 25 * * *", "hour", "hour field '25': 25 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month", "day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 32 * *", "day-of-month", "day-of-month field '32': 32 is out of range 1-31"),
        ("0 0 * 13 *", "month", "month field '13': 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week", "day-of-week field '8': 8 is out of range 0-7"),
        ("0 0 * FOO *", "month", "month field 'FOO': 'FOO' is not a number or a name such as JAN"),
        ("0 0 * * MONDAY", "day-of-week", "day-of-week field 'MONDAY': 'MONDAY' is not a number or a name such as SUN"),
        ("0 MON * * *", "hour", "hour field 'MON': 'MON' is not a number"),
        ("1,,2 * * * *", "minute", "minute field '1,,2': empty item in a comma list"),
        ("0 5-2 * * *", "hour", "hour field '5-2': range '5-2' runs backwards"),
        ("*/0 * * * *", "minute", "minute field '*/0': step '0' must be a whole number from 1 to 60"),
        ("*/90 * * * *", "minute", "step '90' must be a whole number from 1 to 60; steps restart at each hour"),
        ("0 0 * * */8", "day-of-week", "step '8' must be a whole number from 1 to 7"),
        ("-5 * * * *", "minute", "a value is missing"),
        ("0 0 L * *", "day-of-month", "'L' (last) is a Quartz/croniter extension"),
        ("0 0 15W * *", "day-of-month", "'W' (nearest weekday)"),
        ("0 0 * * 5#3", "day-of-week", "'#' (nth weekday)"),
        ("0 0 ? * *", "day-of-month", "'?' is Quartz's 'no specific value'; write '*'"),
        ("H * * * *", "minute", "'H' (hashed value) is a Jenkins extension"),
        ("H(0-29) * * * *", "minute", "'H' (hashed value) is a Jenkins extension"),
        ("0 0 * THU *", "month", "'THU' is not a number or a name such as JAN"),  # not the 'H' hint
        ("0 0 * * JUL", "day-of-week", "'JUL' is not a number or a name such as SUN"),  # not the 'L' hint
        ("0 0 * * MON#2", "day-of-week", "'#' (nth weekday)"),
        ("0 0 * * 5L", "day-of-week", "'L' (last)"),
        ("٣ * * * *", "minute", "'٣' is not a number"),
        ("² * * * *", "minute", "'²' is not a number"),
        ("99999999999999999999 * * * *", "minute", "99999999999... is out of range 0-59"),
    ],
)
def test_it_rejects_a_bad_field_with_a_message_naming_it(expr, field, message):
    with pytest.raises(cron.CronError) as caught:
        cron.validate(expr)
    assert caught.value.field == field
    assert message in str(caught.value)


@pytest.mark.parametrize("expr", ["", "   ", "* * * *", "* * * * * * * *", "every day"])
def test_it_rejects_the_wrong_number_of_fields_without_naming_one(expr):
    with pytest.raises(cron.CronError, match="cron takes five: minute hour day-of-month month day-of-week") as caught:
        cron.validate(expr)
    assert caught.value.field is None


def test_six_fields_explain_seconds_first_dialects_and_suggest_the_five_field_form():
    with pytest.raises(cron.SecondsFieldError) as caught:
        cron.validate("0 30 2 ? * 2-6")
    message = str(caught.value)
    assert "seconds-first dialect such as Quartz" in message
    assert "day-of-week 1 is Sunday" in message
    # Quartz 2-6 is Monday-Friday; POSIX says 1-5.
    assert caught.value.suggestion == "30 2 * * 1-5"
    assert "'30 2 * * 1-5'" in message
    assert caught.value.field is None


@pytest.mark.parametrize(
    ("expr", "suggestion"),
    [
        ("0 0 12 * * ?", "0 12 * * *"),
        ("0 15 10 ? * MON-FRI", "15 10 * * MON-FRI"),
        ("0 0/5 14 * * ?", "0/5 14 * * *"),
        ("0 0 12 ? * 1 *", "0 12 * * 0"),  # seven fields, any year; Quartz 1 is Sunday
        ("30 0 12 * * ?", None),  # second 30 has no five-field form
        ("0 0 12 ? * 6L", None),  # last Friday: no POSIX form
        ("0 0 12 ? * 0", None),  # Quartz has no day 0
        ("0 0 12 * * ? 2030", None),  # one year only
    ],
)
def test_the_quartz_suggestion_is_given_only_when_exact(expr, suggestion):
    with pytest.raises(cron.SecondsFieldError) as caught:
        cron.validate(expr)
    assert caught.value.suggestion == suggestion


def test_reboot_is_rejected_and_unknown_macros_are_named():
    with pytest.raises(cron.CronError, match="@reboot"):
        cron.validate("@reboot")
    with pytest.raises(cron.CronError, match="unknown macro '@fortnightly'"):
        cron.validate("@fortnightly")


def test_an_overlong_expression_is_rejected_before_parsing():
    with pytest.raises(cron.CronError, match="longer than 200 characters"):
        cron.validate(",".join(["1"] * 150) + " * * * *")


def test_an_unknown_zone_is_a_cron_error():
    for name in ("Mars/Base", "", "America", "../etc/passwd", "utc", "Europe/London/", "x" * 300, "a\x00b"):
        with pytest.raises(cron.CronError, match="unknown time zone"):
            cron.zone(name)
    assert str(cron.zone("Australia/Lord_Howe")) == "Australia/Lord_Howe"


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="aware"):
        cron.next_ticks("* * * * *", "UTC", datetime(2027, 1, 1), 1)  # noqa: DTZ001


# --- what the fields mean ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "minutes"),
    [
        ("5-5 * * * *", {5}),  # croniter 7 reads this as every minute
        ("59/15 * * * *", {59}),
        ("5/15 * * * *", {5, 20, 35, 50}),
        ("10-40/10 * * * *", {10, 20, 30, 40}),
        ("*/7 * * * *", {0, 7, 14, 21, 28, 35, 42, 49, 56}),
        ("0,30,0 * * * *", {0, 30}),
        ("*/60 * * * *", {0}),
        ("0005 * * * *", {5}),
    ],
)
def test_minute_field_values(expr, minutes):
    assert cron.parse(expr).minutes == minutes


@pytest.mark.parametrize(
    ("dow", "days"),
    [
        ("0", {0}),
        ("7", {0}),
        ("5-7", {5, 6, 0}),
        ("0-7", {0, 1, 2, 3, 4, 5, 6}),
        ("MON-FRI", {1, 2, 3, 4, 5}),
        ("sat,Sun", {6, 0}),
        ("*/2", {0, 2, 4, 6}),
        ("*/3", {0, 3, 6}),
        ("5/2", {5, 0}),
    ],
)
def test_day_of_week_values_with_sunday_as_0_or_7(dow, days):
    assert cron.parse(f"0 0 * * {dow}").weekdays == days


def test_month_names_and_ranges():
    assert cron.parse("0 0 1 jan-MAR,Dec *").months == {1, 2, 3, 12}
    assert cron.parse("0 0 1 JAN/4 *").months == {1, 5, 9}


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("  @DAILY ", "0 0 * * *"),
    ],
)
def test_macros_fire_exactly_like_their_five_field_forms(macro, equivalent):
    assert cron.parse(macro).text == equivalent
    for zone in ("UTC", "Europe/London"):
        after = datetime(2027, 3, 20, tzinfo=UTC)
        assert cron.next_ticks(macro, zone, after, 10) == cron.next_ticks(equivalent, zone, after, 10)


def test_the_dst_rule_follows_debian_crons_leading_star():
    assert cron.parse("30 2 * * *").fixed_time
    assert cron.parse("0-59/15 2 * * *").fixed_time  # a range step, not a '*'
    assert cron.parse("0 1-3 * * *").fixed_time
    assert not cron.parse("*/15 2 * * *").fixed_time
    assert not cron.parse("30 * * * *").fixed_time
    assert not cron.parse("@hourly").fixed_time
    assert cron.parse("@daily").fixed_time


def test_the_day_rule_follows_vixie_crons_leading_star():
    assert not cron.parse("0 0 13 * 5").day_and
    assert not cron.parse("0 0 1-31 * 1").day_and  # restricted in form: OR, so every day
    assert cron.parse("0 0 */2 * 1").day_and
    assert cron.parse("0 0 13 * *").day_and


# --- expressions that never fire, or rarely ------------------------------------------------------


@pytest.mark.parametrize(
    "expr", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30,31 2 *", "* * 31 2 */2", "0 0 30-31/1 2 *"]
)
def test_a_never_firing_expression_is_valid_and_returns_nothing_at_once(expr):
    cron.validate(expr)
    assert not cron.parse(expr).can_fire
    started = time.perf_counter()
    assert cron.next_ticks(expr, "Europe/London", T0, 5) == []
    assert cron.ticks_between(expr, "UTC", T0, T0 + timedelta(days=3650)) == []
    assert cron.latest_tick(expr, "America/Santiago", T0) is None
    assert time.perf_counter() - started < 0.5


def test_day_30_of_february_fires_when_day_of_week_is_restricted_too():
    # Both restricted: OR, so every Monday in February.
    ticks = cron.next_ticks("0 0 30 2 1", "UTC", T0, 4)
    assert [t.day for t in ticks] == [1, 8, 15, 22]


def test_a_leap_day_expression_finds_ticks_across_the_missing_2100_leap_year():
    ticks = cron.next_ticks("0 0 29 2 *", "UTC", datetime(2090, 1, 1, tzinfo=UTC), 4)
    assert [t.year for t in ticks] == [2092, 2096, 2104, 2108]
    assert cron.latest_tick("0 0 29 2 *", "UTC", datetime(2103, 1, 1, tzinfo=UTC)) == datetime(2096, 2, 29, tzinfo=UTC)


def test_a_leap_day_on_a_given_weekday_is_found_decades_apart():
    # 29 February on a Sunday (day-of-week starts with '*', so AND): 2032, 2060, 2088.
    ticks = cron.next_ticks("0 0 29 2 */7", "UTC", T0, 3)
    assert [t.year for t in ticks] == [2032, 2060, 2088]


def test_searches_stop_at_the_ends_of_the_calendar_without_overflowing():
    assert cron.next_ticks("0 0 * * *", "Pacific/Kiritimati", datetime(9999, 12, 20, tzinfo=UTC), 30)[-1] <= datetime(
        9999, 12, 28, tzinfo=UTC
    )
    assert cron.latest_tick("0 0 * * *", "Pacific/Kiritimati", datetime(1, 1, 2, tzinfo=UTC)) is None
    assert cron.ticks_between("0 0 1 1 *", "UTC", datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC), 3)


def test_ticks_between_a_long_range_is_fast_and_exact():
    started = time.perf_counter()
    ticks = cron.ticks_between("*/5 * * * *", "UTC", T0, T0 + timedelta(days=35))
    assert time.perf_counter() - started < 0.5
    assert len(ticks) == 35 * 288
    assert ticks[0] == T0 + timedelta(minutes=5) and ticks[-1] == T0 + timedelta(days=35)
    assert cron.ticks_between("*/5 * * * *", "UTC", T0, T0 + timedelta(days=35), limit=500) == ticks[:500]
