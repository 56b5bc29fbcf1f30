"""Business weeks: local Monday to local Monday, converted once to UTC bounds."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta

import pytest

from payouts.weeks import week_of, week_starting, weeks_finished

NO_DELAY = timedelta(0)


def test_a_london_week_with_the_spring_change_lasts_167_hours():
    week = week_starting(date(2027, 3, 22), "Europe/London")
    assert week.period_start == datetime(2027, 3, 22, 0, 0, tzinfo=UTC)  # GMT
    assert week.period_end == datetime(2027, 3, 28, 23, 0, tzinfo=UTC)  # Monday 00:00 BST
    assert week.hours == 167


def test_a_london_week_with_the_autumn_change_lasts_169_hours():
    week = week_starting(date(2027, 10, 25), "Europe/London")
    assert week.period_start == datetime(2027, 10, 24, 23, 0, tzinfo=UTC)  # Monday 00:00 BST
    assert week.period_end == datetime(2027, 11, 1, 0, 0, tzinfo=UTC)  # GMT
    assert week.hours == 169


def test_a_kolkata_week_starts_on_sunday_evening_utc():
    week = week_of(datetime(2027, 3, 3, 12, tzinfo=UTC), "Asia/Kolkata")
    assert week.week_start_local == date(2027, 3, 1)
    assert (week.period_start, week.hours) == (datetime(2027, 2, 28, 18, 30, tzinfo=UTC), 168)


def test_the_week_of_an_instant_is_the_local_one_not_the_utc_one():
    # Sunday 23:30 UTC is already Monday 00:30 in London in summer: the next week.
    assert week_of(datetime(2027, 3, 28, 23, 30, tzinfo=UTC), "Europe/London").week_start_local == date(2027, 3, 29)
    # And Sunday 20:00 in New York is Monday 01:00 UTC: still the earlier week.
    assert week_of(datetime(2027, 3, 29, 1, 0, tzinfo=UTC), "America/New_York").week_start_local == date(2027, 3, 22)


def test_a_zone_that_skips_monday_midnight_starts_the_week_when_the_day_begins():
    # Tehran moved its clocks from 00:00 to 01:00 on Monday 2021-03-22.
    week = week_starting(date(2021, 3, 22), "Asia/Tehran")
    previous = week_starting(date(2021, 3, 15), "Asia/Tehran")
    assert week.period_start == previous.period_end == datetime(2021, 3, 21, 20, 30, tzinfo=UTC)
    assert (previous.hours, week.hours) == (168, 167)


def test_a_zone_that_repeats_monday_midnight_starts_the_week_at_the_first_one():
    # Jerusalem moved its clocks from 01:00 back to 00:00 on Monday 2002-10-07.
    week = week_starting(date(2002, 10, 7), "Asia/Jerusalem")
    previous = week_starting(date(2002, 9, 30), "Asia/Jerusalem")
    assert week.period_start == previous.period_end == datetime(2002, 10, 6, 21, 0, tzinfo=UTC)
    assert (previous.hours, week.hours) == (168, 169)


@pytest.mark.parametrize("zone", ["Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"])
def test_weeks_are_contiguous_and_each_instant_is_in_exactly_one(zone):
    weeks = weeks_finished(
        timezone=zone,
        since=datetime(2027, 1, 1, tzinfo=UTC),
        as_of=datetime(2028, 1, 10, tzinfo=UTC),
        settlement_delay=NO_DELAY,
    )
    assert all(a.period_end == b.period_start for a, b in itertools.pairwise(weeks))
    assert {w.hours for w in weeks} <= {167, 167.5, 168, 168.5, 169}
    assert all(w.week_start_local.weekday() == 0 for w in weeks)


def test_a_week_is_finished_only_after_its_end_plus_the_settlement_delay():
    delay = timedelta(minutes=30)
    end = datetime(2027, 3, 28, 23, 0, tzinfo=UTC)  # the 167-hour London week
    since = datetime(2027, 3, 22, 9, tzinfo=UTC)

    def finished(as_of: datetime) -> list[date]:
        weeks = weeks_finished(timezone="Europe/London", since=since, as_of=as_of, settlement_delay=delay)
        return [w.week_start_local for w in weeks]

    assert finished(end + delay - timedelta(microseconds=1)) == []
    assert finished(end + delay) == [date(2027, 3, 22)]


def test_weeks_start_at_the_week_containing_since():
    weeks = weeks_finished(
        timezone="Asia/Kolkata",
        since=datetime(2027, 3, 10, 4, tzinfo=UTC),  # a Wednesday
        as_of=datetime(2027, 3, 29, tzinfo=UTC),
        settlement_delay=NO_DELAY,
    )
    assert [w.week_start_local for w in weeks] == [date(2027, 3, 8), date(2027, 3, 15), date(2027, 3, 22)]


def test_a_week_must_start_on_a_monday():
    with pytest.raises(ValueError, match="not a Monday"):
        week_starting(date(2027, 3, 23), "UTC")
