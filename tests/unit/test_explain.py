"""The cron explainer service: readings, summary, fire times, warnings, and hostile input."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explainer.explain import Explanation, cron_explain
from scheduling import cron
from tests.unit.test_cron_property import ZONES, expressions

AFTER = datetime(2027, 1, 1, tzinfo=UTC)


def explain(expr: str, tz: str = "UTC", count: int = 5, after: datetime = AFTER) -> Explanation:
    return cron_explain(expr=expr, tz=tz, count=count, after=after)


def meanings(explanation: Explanation) -> dict[str, str]:
    return {f.name: f.meaning for f in explanation.fields}


def codes(explanation: Explanation) -> list[str]:
    return [w.code for w in explanation.warnings]


# --- readings and summary -------------------------------------------------------------------


def test_it_reads_each_field_in_words():
    explanation = explain("*/15 9-17 1,15 JAN-MAR MON-FRI")
    assert meanings(explanation) == {
        "minute": "every 15 minutes: 0, 15, 30 and 45",
        "hour": "hours 9-17",
        "day-of-month": "days 1 and 15",
        "month": "January to March",
        "day-of-week": "Monday to Friday",
    }
    assert [f.text for f in explanation.fields] == ["*/15", "9-17", "1,15", "JAN-MAR", "MON-FRI"]


@pytest.mark.parametrize(
    ("expr", "field", "meaning"),
    [
        ("* * * * *", "minute", "every minute"),
        ("5 * * * *", "minute", "minute 5"),
        ("5/20 * * * *", "minute", "every 20 minutes from 5: 5, 25 and 45"),
        ("10-40/10 * * * *", "minute", "every 10 minutes from 10 to 40: 10, 20, 30 and 40"),
        ("*/2 * * * *", "minute", "every 2 minutes: 0, 2, 4, ..., 58 (30 values)"),
        ("0 2 * * *", "hour", "hour 2"),
        ("0 0 * * 5-7", "day-of-week", "Friday to Sunday"),
        ("0 0 * * 0,6", "day-of-week", "Saturday and Sunday"),
        ("0 0 * 2,4,6 *", "month", "February, April and June"),
    ],
)
def test_field_meanings(expr, field, meaning):
    assert meanings(explain(expr))[field] == meaning


@pytest.mark.parametrize(
    ("expr", "tz", "summary"),
    [
        ("0 2 * * *", "UTC", "At 02:00, every day (UTC time)"),
        ("*/15 * * * *", "UTC", "Every 15 minutes, every day (UTC time)"),
        ("30 9,17 * * 1-5", "Europe/London", "At 09:30 and 17:30, on Monday to Friday (Europe/London time)"),
        ("0 0 13 * 5", "UTC", "At 00:00, on day 13 of the month or on Friday (UTC time)"),
        (
            "0 0 */2 * 5",
            "UTC",
            "At 00:00, on days 1, 3, 5, ..., 31 (16 values) of the month if it falls on Friday (UTC time)",
        ),
        ("30 20 * * 0", "UTC", "At 20:30, on Sunday (UTC time)"),
        ("0 * * 1 *", "UTC", "At minute 0 of every hour, every day, in January (UTC time)"),
        ("*/5 9-17 * * *", "UTC", "Every 5 minutes during hours 9-17, every day (UTC time)"),
        ("@weekly", "UTC", "At 00:00, on Sunday (UTC time)"),
    ],
)
def test_the_summary_is_one_line(expr, tz, summary):
    assert explain(expr, tz).summary == summary


# --- fire times ---------------------------------------------------------------------------------


def test_next_fire_times_are_given_in_utc_and_in_the_zone():
    explanation = explain("0 9 * * *", "Asia/Kolkata", count=2)
    assert [f.utc for f in explanation.fires] == [
        datetime(2027, 1, 1, 3, 30, tzinfo=UTC),
        datetime(2027, 1, 2, 3, 30, tzinfo=UTC),
    ]
    assert [f.local.isoformat() for f in explanation.fires] == [
        "2027-01-01T09:00:00+05:30",
        "2027-01-02T09:00:00+05:30",
    ]


def test_fire_times_follow_the_dst_rules():
    explanation = explain("30 1 * * *", "Europe/London", count=2, after=datetime(2027, 10, 30, 12, tzinfo=UTC))
    assert [f.local.isoformat() for f in explanation.fires] == [
        "2027-10-31T01:30:00+01:00",
        "2027-11-01T01:30:00+00:00",
    ]


# --- warnings ---------------------------------------------------------------------------------------


def test_both_day_fields_restricted_warns_that_they_combine_with_or():
    explanation = explain("0 0 13 * 5")
    (warning,) = explanation.warnings
    assert warning.code == "day-or"
    assert "combine with OR" in warning.message
    assert "on day 13 of the month and on every Friday" in warning.message
    assert "'0 0 13 * *'" in warning.message
    assert [f.utc.day for f in explanation.fires] == [8, 13, 15, 22, 29]


def test_a_day_field_behind_a_star_warns_that_they_combine_with_and():
    assert codes(explain("0 0 */2 * 5")) == ["day-and"]
    assert codes(explain("0 0 * * 5")) == []
    assert codes(explain("0 0 1-31 * 5")) == ["day-or"]


def test_six_fields_raise_an_error_that_explains_seconds_first_dialects():
    with pytest.raises(cron.SecondsFieldError) as caught:
        explain("0 0 12 * * ?")
    assert "Quartz" in str(caught.value) and "day-of-week 1 is Sunday" in str(caught.value)
    assert caught.value.suggestion == "0 12 * * *"


def test_a_fixed_local_time_that_dst_skips_and_repeats_is_named_with_its_dates():
    warnings = explain("30 1 * * *", "Europe/London").warnings
    assert [w.code for w in warnings] == ["dst-skipped", "dst-repeated"]
    assert warnings[0].message == (
        "on 2027-03-28 the clocks go forward and local 01:30 does not exist in Europe/London; "
        "it runs once right after the jump, at 02:00 BST (01:00 UTC)"
    )
    assert warnings[1].message == (
        "on 2027-10-31 the clocks go back and local 01:30 happens twice in Europe/London; "
        "it runs once, the first time, at 01:30 BST (00:30 UTC)"
    )


def test_a_real_time_expression_warns_that_skipped_runs_are_lost_and_repeated_ones_doubled():
    warnings = explain("*/15 1 * * *", "America/New_York").warnings
    assert [w.code for w in warnings] == ["dst-repeated"]  # New York skips 02:00-02:59, not 01:xx
    assert "2027-11-07" in warnings[0].message and "runs both times" in warnings[0].message
    (skipped,) = explain("*/15 2 * * *", "America/New_York").warnings
    assert skipped.code == "dst-skipped"
    assert "on 2027-03-14" in skipped.message and "those 4 runs are skipped" in skipped.message


def test_dst_warnings_look_one_year_ahead_of_after():
    warnings = explain("30 1 * * *", "Europe/London", after=datetime(2027, 6, 1, tzinfo=UTC)).warnings
    assert [w.message[:13] for w in warnings] == ["on 2027-10-31", "on 2028-03-26"]


def test_dst_warnings_only_for_dates_the_expression_runs_on():
    # 2027-03-28 and 2027-10-31 are Sundays.
    assert codes(explain("30 1 * * 1", "Europe/London")) == []
    assert codes(explain("30 1 * * 0", "Europe/London")) == ["dst-skipped", "dst-repeated"]


@pytest.mark.parametrize(
    ("expr", "tz"), [("0 12 * * *", "Europe/London"), ("30 1 * * *", "UTC"), ("30 2 * * *", "Asia/Kolkata")]
)
def test_no_dst_warning_where_the_clocks_do_not_touch_the_schedule(expr, tz):
    assert codes(explain(expr, tz)) == []


def test_the_dst_rule_is_stated_for_the_expression_and_zone():
    assert explain("30 1 * * *", "Europe/London").dst_rule.startswith("Fixed local time")
    assert explain("*/15 * * * *", "Europe/London").dst_rule.startswith("Real time")
    assert "does not change its clocks" in explain("30 1 * * *", "Asia/Kolkata").dst_rule


def test_an_expression_that_never_fires_says_so_and_lists_no_fire_times():
    explanation = explain("0 0 30 2 *", "Europe/London")
    assert explanation.fires == ()
    assert explanation.warnings[0].code == "never-fires"
    assert explanation.warnings[0].message == "never fires: there is no day 30 in February"


def test_an_uneven_step_warns_about_the_short_interval():
    (warning,) = explain("*/7 * * * *").warnings
    assert warning.code == "uneven-step"
    assert warning.message == "'*/7' restarts every hour: after 56 the next is 0, 4 minutes later, not 7"
    assert codes(explain("*/15 */6 * * *")) == []


# --- bad input and JSON --------------------------------------------------------------------------------


def test_a_bad_field_raises_a_cron_error_naming_it():
    with pytest.raises(cron.CronError) as caught:
        explain("0 24 * * *")
    assert caught.value.field == "hour"


def test_a_bad_zone_raises_a_cron_error():
    with pytest.raises(cron.CronError, match="unknown time zone"):
        explain("0 0 * * *", "Europe/Atlantis")


def test_a_count_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="count must be between 1 and 100"):
        explain("0 0 * * *", count=0)


def test_as_dict_is_json_ready():
    data = explain("30 1 * * *", "Europe/London", count=1).as_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["next"] == [{"utc": "2027-01-01T01:30:00+00:00", "local": "2027-01-01T01:30:00+00:00"}]
    assert [w["code"] for w in data["warnings"]] == ["dst-skipped", "dst-repeated"]
    assert data["fields"][0] == {"name": "minute", "text": "30", "meaning": "minute 30"}
    assert set(data) == {"expression", "normalized", "timezone", "summary", "dst_rule", "fields", "next", "warnings"}


CRON_ALPHABET = st.sampled_from([*"0123456789*/-,?#LWH@ \t", "MON", "jan", "7", "60", "٣", "²", "\x00", "é"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(CRON_ALPHABET, max_size=40).map("".join)), st.text(max_size=20))
def test_hostile_text_raises_only_cron_error(expr, tz):
    for zone in (tz, "UTC"):
        try:
            explanation = cron_explain(expr=expr, tz=zone, count=3, after=AFTER)
        except cron.CronError:
            continue
        json.dumps(explanation.as_dict())


@settings(max_examples=250, deadline=None)
@given(expressions, st.sampled_from(ZONES), st.datetimes(timezones=st.just(UTC)), st.integers(1, 10))
def test_any_valid_expression_is_explained_from_any_date(expr, tz, after, count):
    explanation = cron_explain(expr=expr, tz=tz, count=count, after=after)
    assert len(explanation.fields) == 5 and explanation.summary
    assert len(explanation.fires) <= count
    assert all(after < f.utc and f.local == f.utc for f in explanation.fires)
    json.dumps(explanation.as_dict())
