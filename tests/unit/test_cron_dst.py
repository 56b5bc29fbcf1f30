"""Cron ticks across daylight saving, zone by zone (cronie's rules; see scheduling/cron.py).

Transition instants are found from zoneinfo here, independently of the code under test,
and the concrete 2027 dates are asserted once per zone so a tzdata change is noticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduling import cron


@dataclass(frozen=True)
class Transition:
    instant: datetime  # the first instant with the new offset, UTC
    before: timedelta
    after: timedelta

    @property
    def forward(self) -> bool:
        return self.after > self.before

    def local_date(self, zone: str) -> date:
        return self.instant.astimezone(ZoneInfo(zone)).date()


def transitions(zone: str, year: int) -> list[Transition]:
    """Offset changes of ``zone`` in ``year``: hour by hour in UTC, then to the minute."""
    tz = ZoneInfo(zone)
    found = []
    moment = datetime(year, 1, 1, tzinfo=UTC)
    while moment.year == year:
        nxt = moment + timedelta(hours=1)
        if moment.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            exact = next(
                moment + timedelta(minutes=m)
                for m in range(1, 61)
                if (moment + timedelta(minutes=m)).astimezone(tz).utcoffset() != moment.astimezone(tz).utcoffset()
            )
            found.append(Transition(exact, _offset(moment, tz), _offset(exact, tz)))
        moment = nxt
    return found


def _offset(moment: datetime, tz: ZoneInfo) -> timedelta:
    offset = moment.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


def spring(zone: str, year: int = 2027) -> Transition:
    return next(t for t in transitions(zone, year) if t.forward)


def autumn(zone: str, year: int = 2027) -> Transition:
    return next(t for t in transitions(zone, year) if not t.forward)


def ticks_on(expr: str, zone: str, day: date) -> list[datetime]:
    """Ticks whose local date is ``day``."""
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC) - timedelta(days=2)
    ticks = cron.ticks_between(expr, zone, start, start + timedelta(days=4))
    return [t for t in ticks if t.astimezone(ZoneInfo(zone)).date() == day]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def local(zone: str, year: int, month: int, day: int, hour: int, minute: int, fold: int = 0) -> datetime:
    """The UTC instant of a wall time in ``zone``; ``fold=1`` picks the second of a repeat."""
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


def every(start: datetime, step: timedelta, end: datetime) -> list[datetime]:
    out = []
    while start <= end:
        out.append(start)
        start += step
    return out


# --- the zones and their 2027 transitions ------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "spring_date", "autumn_date"),
    [
        ("Europe/London", date(2027, 3, 28), date(2027, 10, 31)),
        ("Europe/Dublin", date(2027, 3, 28), date(2027, 10, 31)),
        ("America/New_York", date(2027, 3, 14), date(2027, 11, 7)),
        ("Australia/Lord_Howe", date(2027, 10, 3), date(2027, 4, 4)),
        ("America/Santiago", date(2027, 9, 5), date(2027, 4, 3)),
    ],
)
def test_transition_dates_in_2027_are_the_ones_these_tests_assume(zone, spring_date, autumn_date):
    assert spring(zone).local_date(zone) == spring_date
    assert autumn(zone).local_date(zone) == autumn_date
    tz = ZoneInfo(zone)
    expected = sorted(t.local_date(zone) for t in transitions(zone, 2027))
    assert cron.dst_transition_dates(tz, date(2027, 1, 1), date(2027, 12, 31)) == expected


def test_dublin_really_has_negative_dst_in_tzdata():
    # IST (summer) is Dublin's standard time; winter GMT is the "daylight saving" with dst() = -1 h.
    dublin = ZoneInfo("Europe/Dublin")
    winter, summer = datetime(2027, 1, 15, tzinfo=dublin), datetime(2027, 7, 15, tzinfo=dublin)
    assert (winter.dst(), winter.utcoffset()) == (timedelta(hours=-1), timedelta(0))
    assert (summer.dst(), summer.utcoffset()) == (timedelta(0), timedelta(hours=1))


def test_kolkata_has_no_transition_and_a_daily_time_is_the_same_utc_instant_all_year():
    assert transitions("Asia/Kolkata", 2027) == []
    ticks = cron.ticks_between("30 2 * * *", "Asia/Kolkata", utc(2026, 12, 31, 21), utc(2027, 12, 31, 21))
    assert len(ticks) == 365
    assert {(t.hour, t.minute) for t in ticks} == {(21, 0)}


# --- Europe/London --------------------------------------------------------------------------


def test_london_spring_gap_fixed_time_fires_once_right_after_the_gap():
    # 2027-03-28: 01:00 GMT -> 02:00 BST; 01:30 does not exist.
    ticks = cron.ticks_between("30 1 * * *", "Europe/London", utc(2027, 3, 27), utc(2027, 3, 30))
    assert ticks == [utc(2027, 3, 27, 1, 30), utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)]
    assert ticks[1].astimezone(ZoneInfo("Europe/London")).strftime("%H:%M %Z") == "02:00 BST"


def test_london_autumn_repeat_fixed_time_fires_once_at_the_first_occurrence():
    # 2027-10-31: 02:00 BST -> 01:00 GMT; 01:30 happens at 00:30 UTC and at 01:30 UTC.
    assert ticks_on("30 1 * * *", "Europe/London", date(2027, 10, 31)) == [utc(2027, 10, 31, 0, 30)]


def test_london_gap_times_collapse_into_one_tick_and_later_times_are_kept():
    ticks = ticks_on("0,30 1,2 * * *", "Europe/London", date(2027, 3, 28))
    assert ticks == [local("Europe/London", 2027, 3, 28, 2, 0), local("Europe/London", 2027, 3, 28, 2, 30)]


@pytest.mark.parametrize("expr", ["30 * * * *", "*/30 * * * *", "*/15 * * * *", "15,45 * * * *"])
@pytest.mark.parametrize("which", [spring, autumn])
def test_london_wildcard_hour_or_step_minute_follows_real_time(expr, which):
    # London's offsets are whole hours, so real time means the same UTC minutes every hour.
    day = which("Europe/London").instant
    start = utc(day.year, day.month, day.day)
    ticks = cron.ticks_between(
        expr, "Europe/London", start - timedelta(seconds=1), start + timedelta(hours=24) - timedelta(seconds=1)
    )
    minutes = sorted(cron.parse(expr).minutes)
    assert ticks == [start + timedelta(hours=h, minutes=m) for h in range(24) for m in minutes]


def test_london_30_past_every_hour_fires_twice_at_local_0130_in_autumn_and_never_in_spring():
    tz = ZoneInfo("Europe/London")
    autumn_ticks = ticks_on("30 * * * *", "Europe/London", date(2027, 10, 31))
    spring_ticks = ticks_on("30 * * * *", "Europe/London", date(2027, 3, 28))
    assert [t for t in autumn_ticks if t.astimezone(tz).hour == 1] == [
        utc(2027, 10, 31, 0, 30),
        utc(2027, 10, 31, 1, 30),
    ]
    assert [t for t in spring_ticks if t.astimezone(tz).hour == 1] == []
    assert (len(spring_ticks), len(autumn_ticks)) == (23, 25)


def test_london_a_week_of_daily_ticks_across_spring_has_the_right_utc_instants():
    ticks = cron.ticks_between("0 9 * * *", "Europe/London", utc(2027, 3, 25), utc(2027, 4, 1))
    assert ticks == [
        utc(2027, 3, 25, 9),
        utc(2027, 3, 26, 9),
        utc(2027, 3, 27, 9),
        utc(2027, 3, 28, 8),
        utc(2027, 3, 29, 8),
        utc(2027, 3, 30, 8),
        utc(2027, 3, 31, 8),
    ]


def test_london_a_week_of_daily_ticks_across_autumn_has_the_right_utc_instants():
    ticks = cron.ticks_between("0 9 * * *", "Europe/London", utc(2027, 10, 28), utc(2027, 11, 4))
    assert ticks == [utc(2027, 10, d, 8) for d in (28, 29, 30)] + [utc(2027, 10, 31, 9)] + [
        utc(2027, 11, d, 9) for d in (1, 2, 3)
    ]


# --- Europe/Dublin (negative DST in tzdata, same wall-clock changes as London) -------------


def test_dublin_spring_gap_fixed_time_fires_once_right_after_the_gap():
    assert ticks_on("30 1 * * *", "Europe/Dublin", spring("Europe/Dublin").local_date("Europe/Dublin")) == [
        utc(2027, 3, 28, 1, 0)
    ]


def test_dublin_autumn_repeat_fixed_time_fires_once_at_the_first_occurrence():
    day = autumn("Europe/Dublin").local_date("Europe/Dublin")
    assert ticks_on("30 1 * * *", "Europe/Dublin", day) == [local("Europe/Dublin", 2027, 10, 31, 1, 30, fold=0)]
    assert ticks_on("30 1 * * *", "Europe/Dublin", day) == [utc(2027, 10, 31, 0, 30)]


# Dublin and New York alike: an hourly or half-hourly expression follows real time.
@pytest.mark.parametrize("zone", ["Europe/Dublin", "America/New_York"])
@pytest.mark.parametrize("expr", ["30 * * * *", "*/30 * * * *"])
def test_wildcard_expressions_follow_real_time_through_both_transitions(expr, zone):
    for transition in (spring(zone), autumn(zone)):
        start = transition.instant - timedelta(hours=3)
        ticks = cron.ticks_between(expr, zone, start, start + timedelta(hours=6))
        step = timedelta(minutes=60 if expr.startswith("30") else 30)
        assert ticks == every(ticks[0], step, start + timedelta(hours=6))
        assert ticks[0] - start <= step


# --- America/New_York -----------------------------------------------------------------------


def test_new_york_spring_gap_fixed_time_fires_at_three_edt():
    # 2027-03-14: 02:00 EST -> 03:00 EDT; 02:30 does not exist.
    assert ticks_on("30 2 * * *", "America/New_York", date(2027, 3, 14)) == [utc(2027, 3, 14, 7, 0)]


def test_new_york_autumn_repeat_fixed_time_fires_once_at_the_first_occurrence():
    # 2027-11-07: 02:00 EDT -> 01:00 EST; 01:30 EDT is 05:30 UTC, 01:30 EST 06:30 UTC.
    assert ticks_on("30 1 * * *", "America/New_York", date(2027, 11, 7)) == [utc(2027, 11, 7, 5, 30)]


def test_new_york_a_week_of_daily_ticks_across_spring_has_the_right_utc_instants():
    ticks = cron.ticks_between("0 2 * * *", "America/New_York", utc(2027, 3, 11, 12), utc(2027, 3, 18, 12))
    assert ticks == [utc(2027, 3, d, 7) for d in (12, 13)] + [utc(2027, 3, 14, 7)] + [
        utc(2027, 3, d, 6) for d in (15, 16, 17, 18)
    ]


# --- Australia/Lord_Howe (a 30-minute shift) -----------------------------------------------


def test_lord_howe_spring_gap_fixed_time_fires_at_the_end_of_the_half_hour_gap():
    # 2027-10-03: 02:00 +10:30 -> 02:30 +11; 02:15 does not exist, the gap ends at 15:30 UTC.
    transition = spring("Australia/Lord_Howe")
    assert transition.instant == utc(2027, 10, 2, 15, 30)
    assert ticks_on("15 2 * * *", "Australia/Lord_Howe", date(2027, 10, 3)) == [utc(2027, 10, 2, 15, 30)]
    # 02:45 exists (after the gap) and fires at its own time.
    assert ticks_on("45 2 * * *", "Australia/Lord_Howe", date(2027, 10, 3)) == [utc(2027, 10, 2, 15, 45)]


def test_lord_howe_autumn_repeat_fixed_time_fires_once_at_the_first_occurrence():
    # 2027-04-04: 02:00 +11 -> 01:30 +10:30; 01:45 happens at 14:45 and at 15:15 UTC.
    transition = autumn("Australia/Lord_Howe")
    assert transition.instant == utc(2027, 4, 3, 15, 0)
    assert ticks_on("45 1 * * *", "Australia/Lord_Howe", date(2027, 4, 4)) == [utc(2027, 4, 3, 14, 45)]
    # 01:15 is before the repeated half hour: once, as any day.
    assert ticks_on("15 1 * * *", "Australia/Lord_Howe", date(2027, 4, 4)) == [utc(2027, 4, 3, 14, 15)]


def test_lord_howe_every_30_minutes_follows_real_time_through_both_transitions():
    for transition in (spring("Australia/Lord_Howe"), autumn("Australia/Lord_Howe")):
        start = transition.instant - timedelta(hours=3)
        ticks = cron.ticks_between("*/30 * * * *", "Australia/Lord_Howe", start, start + timedelta(hours=6))
        assert ticks == every(start + timedelta(minutes=30), timedelta(minutes=30), start + timedelta(hours=6))


def test_lord_howe_30_past_every_hour_fires_at_each_real_local_half_past():
    # Autumn: wall 01:30 happens twice (14:30 and 15:00 UTC); spring: 02:30 +11 exists.
    autumn_ticks = ticks_on("30 * * * *", "Australia/Lord_Howe", date(2027, 4, 4))
    assert [t for t in autumn_ticks if t < utc(2027, 4, 3, 17)][-4:] == [
        utc(2027, 4, 3, 13, 30),
        utc(2027, 4, 3, 14, 30),
        utc(2027, 4, 3, 15, 0),
        utc(2027, 4, 3, 16, 0),
    ]
    spring_ticks = ticks_on("30 * * * *", "Australia/Lord_Howe", date(2027, 10, 3))
    assert [t for t in spring_ticks if t < utc(2027, 10, 2, 17)][-3:] == [
        utc(2027, 10, 2, 15, 0),
        utc(2027, 10, 2, 15, 30),
        utc(2027, 10, 2, 16, 30),
    ]


def test_lord_howe_every_minute_of_hour_three_starts_at_three_on_both_transition_days():
    # cronsim starts at 03:30 here (see test_cron_property.py); real time says 03:00.
    for day in (date(2027, 4, 4), date(2027, 10, 3)):
        first = ticks_on("* 3 * * *", "Australia/Lord_Howe", day)[0]
        assert first.astimezone(ZoneInfo("Australia/Lord_Howe")).strftime("%H:%M") == "03:00"


# --- America/Santiago (transitions at midnight) --------------------------------------------


def test_santiago_midnight_gap_fixed_time_fires_at_one():
    # 2027-09-05: 00:00 -04 -> 01:00 -03; a 00:00 job runs at 01:00 -03 (04:00 UTC).
    assert ticks_on("0 0 * * *", "America/Santiago", date(2027, 9, 5)) == [utc(2027, 9, 5, 4, 0)]


def test_santiago_real_time_job_in_the_skipped_midnight_hour_does_not_run_that_day():
    # cronsim fires once at 01:00 here; the skipped hour has no local time to match.
    assert ticks_on("*/30 0 * * *", "America/Santiago", date(2027, 9, 5)) == []
    assert len(ticks_on("*/30 0 * * *", "America/Santiago", date(2027, 9, 6))) == 2


def test_santiago_repeated_hour_before_midnight_fixed_time_fires_once():
    # 2027-04-03 24:00 -03 -> 23:00 -04: 23:30 happens at 02:30 and 03:30 UTC on the 4th.
    assert ticks_on("30 23 * * *", "America/Santiago", date(2027, 4, 3)) == [utc(2027, 4, 4, 2, 30)]
    assert ticks_on("30 * * * *", "America/Santiago", date(2027, 4, 3))[-2:] == [
        utc(2027, 4, 4, 2, 30),
        utc(2027, 4, 4, 3, 30),
    ]


# --- day-of-month and day-of-week ----------------------------------------------------------


def test_day_of_month_and_day_of_week_both_restricted_combine_with_or():
    # January 2027: Fridays are 1, 8, 15, 22, 29; the 13th is a Wednesday.
    ticks = cron.ticks_between("0 0 13 * 5", "UTC", utc(2026, 12, 31), utc(2027, 1, 31))
    assert [t.day for t in ticks] == [1, 8, 13, 15, 22, 29]


def test_a_day_field_starting_with_star_combines_with_and():
    # Vixie cron's DOM_STAR: '*/2' counts as unrestricted, so odd days that are Fridays.
    ticks = cron.ticks_between("0 0 */2 * 5", "UTC", utc(2026, 12, 31), utc(2027, 1, 31))
    assert [t.day for t in ticks] == [1, 15, 29]


def test_dom_dow_or_in_a_local_zone_uses_the_local_date():
    ticks = cron.ticks_between("0 0 13 * 5", "Asia/Kolkata", utc(2026, 12, 31), utc(2027, 1, 31))
    assert [t.astimezone(ZoneInfo("Asia/Kolkata")).day for t in ticks] == [1, 8, 13, 15, 22, 29]
    assert {(t.hour, t.minute) for t in ticks} == {(18, 30)}


def test_a_limit_counts_gap_times_that_share_one_instant_once():
    # Lord Howe 2025-10-05: 02:00-02:25 all run at 02:30 +11. Found by the cronsim property
    # test: counting them six times made next_ticks stop early and skip 04:00-04:10.
    ticks = cron.next_ticks("0,*/5 0-1/2,*/2 * * *", "Australia/Lord_Howe", utc(2025, 10, 4, 13, 30), 20)
    assert ticks[11:14] == [utc(2025, 10, 4, 15, 30), utc(2025, 10, 4, 15, 35), utc(2025, 10, 4, 15, 40)]
    assert ticks[-3:] == [utc(2025, 10, 4, 17, 0), utc(2025, 10, 4, 17, 5), utc(2025, 10, 4, 17, 10)]
