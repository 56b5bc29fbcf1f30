"""Why scheduling.cron does not evaluate with croniter 7.0.0: each case pinned.

Each test asserts croniter's behaviour and ours side by side. If a croniter upgrade
changes one, the test fails and the choice can be revisited with evidence.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from scheduling import cron

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def croniter_ticks(expr: str, start: datetime, count: int) -> list[datetime]:
    it = croniter(expr, start)
    return [it.get_next(datetime).astimezone(UTC) for _ in range(count)]


def test_croniter_reads_a_one_value_range_as_the_whole_field():
    assert croniter.expand("5-5 * * * *")[0][0] == ["*"]
    assert croniter_ticks("5-5 * * * *", T0, 2) == [T0.replace(minute=1), T0.replace(minute=2)]
    assert cron.next_ticks("5-5 * * * *", "UTC", T0, 2) == [T0.replace(minute=5), T0.replace(hour=1, minute=5)]


def test_croniter_fires_a_fixed_local_time_twice_in_the_repeated_autumn_hour():
    london = ZoneInfo("Europe/London")
    start = datetime(2027, 10, 30, 12, tzinfo=london)
    assert croniter_ticks("30 1 * * *", start, 2) == [
        datetime(2027, 10, 31, 0, 30, tzinfo=UTC),
        datetime(2027, 10, 31, 1, 30, tzinfo=UTC),
    ]
    assert cron.next_ticks("30 1 * * *", "Europe/London", start, 2) == [
        datetime(2027, 10, 31, 0, 30, tzinfo=UTC),
        datetime(2027, 11, 1, 1, 30, tzinfo=UTC),
    ]


def test_croniter_ors_a_step_day_of_month_with_a_restricted_day_of_week():
    # Vixie cron: '*/2' starts with '*', so AND: odd days that are Fridays (15 and 29 January, 5 February).
    assert [t.day for t in croniter_ticks("0 0 */2 * 5", T0, 3)] == [3, 5, 7]
    assert [t.day for t in cron.next_ticks("0 0 */2 * 5", "UTC", T0, 3)] == [15, 29, 5]


def test_croniter_accepts_extensions_and_wrapping_ranges_that_posix_cron_does_not():
    for expr in ("0 0 L * *", "0 0 * * 5#3", "0 22-2 * * *", "0 0 ? * *", "0 0 15W * *"):
        assert croniter.is_valid(expr)
        assert not _valid(expr)


def _valid(expr: str) -> bool:
    try:
        cron.validate(expr)
    except cron.CronError:
        return False
    return True
