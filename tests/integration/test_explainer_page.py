"""The cron explainer page: the explanation of a good expression, an error on the field
at fault for a bad one, public (it reads no data) with a rate cap for visitors, and never
a server error whatever is typed."""

from __future__ import annotations

import re
import zoneinfo
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduling import cron
from tests.admin_pages import ADMIN_PAGES
from tests.engine import T0

# Every test here reads admin pages (admin_pages, tests/conftest.py). Each starts with no
# requests counted against the visitors' rate cap: the counts are rows, rolled back.
pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

URL = reverse("cron_explainer")


def _staff():
    client = Client()
    client.force_login(User.objects.create_user("viewer", is_staff=True))  # no permissions at all
    return client


@pytest.fixture
def staff():
    return _staff()


def _explain(client, **query):
    response = client.get(URL, query)
    assert response.status_code == 200
    return response, response.content.decode()


def _field_errors(response, name):
    return [str(error) for error in response.context["form"].errors.get(name, [])]


def test_it_explains_the_or_trap_and_lists_the_fire_times_in_utc_and_the_zone():
    with time_machine.travel(T0, tick=False):  # Monday 2027-03-01 12:00 UTC (log in then too)
        response, page = _explain(_staff(), expression="0 0 13 * 5", zone="Asia/Kolkata", count="4")
    explanation = response.context["explanation"]
    assert [w.code for w in explanation.warnings] == ["day-or"]
    assert "combine with OR" in page
    rows = re.findall(r'<tr class="fire"><td>\d+</td><td>(.*?)</td><td>(.*?)</td></tr>', page)
    expected = cron.next_ticks("0 0 13 * 5", "Asia/Kolkata", T0, 4)
    assert [utc for utc, _ in rows] == [f"{t:%a %Y-%m-%d %H:%M} UTC" for t in expected]
    # Fridays and the 13th, at midnight in Kolkata (18:30 UTC the day before).
    assert [local for _, local in rows] == [
        "Fri 2027-03-05 00:00 IST",
        "Fri 2027-03-12 00:00 IST",
        "Sat 2027-03-13 00:00 IST",
        "Fri 2027-03-19 00:00 IST",
    ]


def test_each_field_is_read_in_words(staff):
    _, page = _explain(staff, expression="*/15 9-17 * * 1-5")
    assert "every 15 minutes: 0, 15, 30 and 45" in page
    assert "Monday to Friday" in page


def test_a_malformed_expression_gets_an_error_on_its_field_naming_the_cron_field(staff):
    response, page = _explain(staff, expression="61 0 * * *")
    assert _field_errors(response, "expression") == ["minute field '61': 61 is out of range 0-59"]
    assert response.context["explanation"] is None
    assert [(t.name, t.bad) for t in response.context["typed"]][:2] == [("minute", True), ("hour", False)]
    assert 'class="bad"><code>61</code>' in page


def test_six_fields_point_at_the_seconds_first_dialect_and_offer_the_five_field_form(staff):
    response, page = _explain(staff, expression="0 30 2 * * ?")
    [error] = _field_errors(response, "expression")
    assert "seconds-first" in error and "Quartz" in error
    assert response.context["suggestion"] == "30 2 * * *"
    assert "?expression=30%202%20%2A%20%2A%20%2A" in page


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ({"expression": "0 0 * * *", "zone": "Mars/Olympus_Mons"}, "zone", "unknown time zone 'Mars/Olympus_Mons'"),
        ({"expression": "0 0 * * *", "count": "0"}, "count", "greater than or equal to 1"),
        ({"expression": "0 0 * * *", "count": "lots"}, "count", "Enter a whole number."),
        ({"expression": ""}, "expression", "This field is required."),
        ({"expression": "0 0 *\x00 * *"}, "expression", "Null characters are not allowed."),
    ],
)
def test_bad_input_is_an_error_on_its_field(staff, query, field, words):
    response, _ = _explain(staff, **query)
    assert any(words in error for error in _field_errors(response, field))


def test_a_never_firing_expression_is_explained_with_its_warning(staff):
    response, page = _explain(staff, expression="0 0 30 2 *")
    assert [w.code for w in response.context["explanation"].warnings] == ["never-fires"]
    assert "It never fires." in page


def test_anyone_may_use_it_without_logging_in(client):
    response = client.get(URL, {"expression": "0 0 13 * 5"})
    assert response.status_code == 200
    assert [w.code for w in response.context["explanation"].warnings] == ["day-or"]
    assert 'id="explainer-form"' in response.content.decode()


def test_the_admins_old_address_leads_anyone_there_with_the_expression(client):
    response = client.get(reverse("admin:scheduling_cron_explainer"), {"expression": "*/5 * * * *"})
    assert response.status_code == 302
    assert response["Location"] == URL + "?expression=%2A%2F5+%2A+%2A+%2A+%2A"


def test_a_visitor_past_the_rate_cap_is_told_to_wait_and_staff_are_not_capped(client, settings):
    settings.CRON_EXPLAINER_REQUESTS_PER_MINUTE = 3
    with time_machine.travel(T0, tick=False):
        staff = _staff()  # logged in at T0, so the session is live then
        codes = [client.get(URL, {"expression": "* * * * *"}).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        refused = client.get(URL, {"expression": "* * * * *"})
        assert refused["Retry-After"] == "60" and "wait a minute" in refused.content.decode()
        assert [staff.get(URL, {"expression": "* * * * *"}).status_code for _ in range(4)] == [200] * 4
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        assert client.get(URL, {"expression": "* * * * *"}).status_code == 200  # the next minute


# --- Whatever is typed, the answer is a page ---------------------------------------------

# Text without surrogates (which cannot travel in a URL at all).
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)
_token = st.sampled_from(
    [
        "*",
        "*/0",
        "*/-1",
        "0-59/",
        "-1",
        "1-",
        "5-1",
        "//",
        ",",
        ",,",
        "L",
        "5#3",
        "?",
        "W",
        "H",
        "JAN-DEC",
        "SUN-SAT",
        "jan",
        "0x10",
        "1e3",
        "99999999999999999999999",
        "٣",
        "\uff11",
        "\t",
        "@yearly",
        "@reboot",
        "@",
        "'",
        '"',
        "<script>",
        "%00",
        "\u202e",
        "0/0",
        "*/60",
        "*/99999999999",
        "7",
        "8",
        "0-7",
        "31",
        "32",
        "2-30/3",
    ]
)
_hostile = st.lists(_token, min_size=0, max_size=8).map(" ".join)
# Five fields, each plausible or hostile: reaches the explanation as well as the errors.
_five = st.lists(
    st.one_of(_token, st.sampled_from(["0", "30", "*/15", "1-5", "MON", "1,15", "2"])), min_size=5, max_size=5
)
_zones = st.one_of(
    _text.map(lambda s: s[:80]),
    st.sampled_from(sorted(zoneinfo.available_timezones())),
    st.sampled_from(
        [
            "",
            "UTC",
            "Europe/London",
            "../../etc/passwd",
            "/etc/localtime",
            "posix/Europe/Paris",
            "GMT+5",
            "Etc/GMT-14",
            "Asia/Kolkata ",
            "europe/london",
            "a" * 70,
            "Factory",
            "localtime",
        ]
    ),
)
_counts = st.one_of(st.integers(min_value=-(10**30), max_value=10**30).map(str), _text.map(lambda s: s[:20]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expression=st.one_of(_text, _hostile, _five.map(" ".join)), zone=_zones, count=_counts)
@example(expression="0 0 13 * 5", zone="Europe/London", count="5")
@example(expression="1-59999999999999999999/2 * * * *", zone="UTC", count="100")
@example(expression="0 0 29 2 1", zone="Pacific/Kiritimati", count="100")
@example(expression="*/1 */1 */1 */1 */1", zone="Australia/Lord_Howe", count="100")
def test_no_input_ever_gets_a_server_error(staff, expression, zone, count):
    # The test client re-raises any exception a view lets escape: a 500 fails here.
    response = staff.get(URL, {"expression": expression, "zone": zone, "count": count})
    assert response.status_code == 200
    form = response.context["form"]
    assert form.errors or response.context["explanation"] is not None
