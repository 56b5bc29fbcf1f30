"""What a newcomer sees first in the admin after ``make demo``: labels that cannot be read
as counts, money with thousands separators, links that keep their words, no second
scheduler's "Scheduled tasks", a payout's orders under their heading, and a cron
explainer that shows one UTC column for UTC and every error at once."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.urls import reverse

from orders.models import OrderStatus
from payouts.models import Payout
from scheduling.execution import runs_execute
from scheduling.services import run_claim_manual
from tests.admin_pages import ADMIN_PAGES
from tests.engine import T0

pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

ONBOARDED = datetime(2027, 3, 1, 4, 0, tzinfo=UTC)
AS_OF = datetime(2027, 3, 15, 20, 30, tzinfo=UTC)
CHANGELIST = "admin:payouts_payout_changelist"


@pytest.fixture
def paid(restaurant_factory: Any, order_factory: Any) -> Any:
    """One restaurant whose two weeks of big orders are paid by one real run."""
    restaurant = restaurant_factory(name="Midtown Tiffin", timezone="America/New_York", onboarded_at=ONBOARDED)
    for day in (1, 3, 8, 10):
        order_factory(
            OrderStatus.DELIVERED,
            restaurant=restaurant,
            total=Decimal("4321.25"),
            placed_at=ONBOARDED + timedelta(days=day),
        )
    with time_machine.travel(AS_OF + timedelta(minutes=1), tick=False):
        run = run_claim_manual(job_name="weekly-payouts", scheduled_for=AS_OF, now=AS_OF, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")
    return restaurant


def test_the_restaurant_filter_names_the_id_so_it_cannot_be_read_as_a_count(admin_client: Any, paid: Any) -> None:
    page = admin_client.get(reverse(CHANGELIST), {"_facets": "True"}).content.decode()
    assert f"Midtown Tiffin #{paid.pk}" in page
    assert f"Midtown Tiffin ({paid.pk})" not in page


def test_the_totals_have_thousands_separators(admin_client: Any, paid: Any) -> None:
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    totals = re.search(r'<p class="payout-totals" id="payout-totals">(.*?)</p>', page, re.S)
    assert totals is not None
    text = " ".join(totals.group(1).split())
    assert "4 orders, gross <strong>17,285.00</strong>" in text, text


def test_a_payouts_covered_orders_are_not_indented_off_their_heading(admin_client: Any, paid: Any) -> None:
    payout = Payout.objects.filter(order_count__gt=0).order_by("period_start").first()
    assert payout is not None
    page = admin_client.get(reverse("admin:payouts_payout_change", args=[payout.pk])).content.decode()
    assert '<ul style="margin-left: 0; padding-left: 1.5em"><li><a href="' in page


def test_the_operations_links_keep_their_words_and_django_q2s_schedules_are_not_offered(admin_client: Any) -> None:
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "#operations-module th { width: auto; white-space: nowrap; word-break: normal; }" in page
    assert "Schedules dashboard</a>" in page
    assert "Scheduled tasks" not in page
    assert admin_client.get("/admin/django_q/schedule/add/").status_code == 404
    assert "Queued tasks" in page  # django-q2's queue stays, for debugging


def _explain(client: Any, **query: str) -> tuple[Any, str]:
    response = client.get(reverse("cron_explainer"), query)
    assert response.status_code == 200
    return response, response.content.decode()


def test_the_explainer_shows_one_column_for_utc(admin_client: Any) -> None:
    with time_machine.travel(T0, tick=False):
        _, page = _explain(admin_client, expression="30 2 * * *", zone="UTC", count="2")
    assert re.findall(r'<tr class="fire">(.*?)</tr>', page) == [
        "<td>1</td><td>Tue 2027-03-02 02:30 UTC</td>",
        "<td>2</td><td>Wed 2027-03-03 02:30 UTC</td>",
    ]
    with time_machine.travel(T0, tick=False):
        _, page = _explain(admin_client, expression="30 2 * * *", zone="Europe/London", count="1")
    assert re.findall(r'<tr class="fire">(.*?)</tr>', page) == [
        "<td>1</td><td>Tue 2027-03-02 02:30 UTC</td><td>Tue 2027-03-02 02:30 GMT</td>"
    ]


def test_an_invalid_zone_does_not_hide_the_expressions_own_error(admin_client: Any) -> None:
    response, _ = _explain(admin_client, expression="61 * * * *", zone="Mars/Olympus")
    errors = response.context["form"].errors
    assert "zone" in errors
    assert "minute" in " ".join(errors.get("expression", [])), errors
    response, _ = _explain(admin_client, expression="5 * * * *", zone="Mars/Olympus")
    assert list(response.context["form"].errors) == ["zone"]
