"""The payout history in the admin: read-only for everyone, filters, totals, the run that
made each payout, the orders it covers, and a CSV export of exactly the filtered rows."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from orders.models import OrderStatus, Restaurant
from payouts.models import Payout
from payouts.selectors import CSV_HEADER
from scheduling.execution import runs_execute
from scheduling.services import run_claim_manual
from tests.admin_pages import ADMIN_PAGES
from tiffin.money import money_text

pytestmark = ADMIN_PAGES

ONBOARDED = datetime(2027, 3, 1, 4, 0, tzinfo=UTC)
# Four weeks in Kolkata and London; five in New York, where the onboarding instant is
# still Sunday 28 February, so the restaurant's first week is that of 22 February.
AS_OF = datetime(2027, 3, 29, 20, 30, tzinfo=UTC)
CHANGELIST = "admin:payouts_payout_changelist"


@pytest.fixture
def paid(restaurant_factory: Any, order_factory: Any) -> list[Restaurant]:
    """Four restaurants in three zones, a few delivered orders, paid by one real run."""
    restaurants = [
        restaurant_factory(name=name, timezone=zone, onboarded_at=ONBOARDED)
        for name, zone in (
            ("Dosa Darbar", "Asia/Kolkata"),
            ("=HYPERLINK(evil)", "Europe/London"),
            ("Camden Kitchen", "Europe/London"),
            ("Bowery Bowls", "America/New_York"),
        )
    ]
    for n, restaurant in enumerate(restaurants):
        for day in range(0, 21, 4):
            order_factory(
                OrderStatus.DELIVERED,
                restaurant=restaurant,
                total=Decimal(f"{10 + n}.25"),
                placed_at=ONBOARDED + timedelta(days=day, hours=6),
            )
    pay()
    return restaurants


@pytest.fixture
def catering(restaurant_factory: Any, order_factory: Any) -> Restaurant:
    """A restaurant whose first week holds two catering orders (gross 24,691.35), paid by one real run."""
    restaurant = restaurant_factory(name="Big Tent Caterers", timezone="Europe/London", onboarded_at=ONBOARDED)
    for day, total in ((1, "12345.67"), (2, "12345.68")):
        placed_at = ONBOARDED + timedelta(days=day, hours=6)
        order_factory(OrderStatus.DELIVERED, restaurant=restaurant, total=Decimal(total), placed_at=placed_at)
    pay()
    return restaurant


def pay() -> None:
    """Pay every restaurant's finished weeks up to AS_OF by one real run of weekly-payouts."""
    with time_machine.travel(AS_OF + timedelta(minutes=1), tick=False):
        run = run_claim_manual(job_name="weekly-payouts", scheduled_for=AS_OF, now=AS_OF, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")


def export(client: Client, query: str = "", selected: list[int] | None = None) -> list[dict[str, str]]:
    """Run the CSV action on the change list as the browser would post it."""
    data: dict[str, Any] = {"action": "export_csv", "index": 0}
    if selected is None:
        data |= {"select_across": "1", ACTION_CHECKBOX_NAME: [Payout.objects.values_list("pk", flat=True).first()]}
    else:
        data |= {"select_across": "0", ACTION_CHECKBOX_NAME: selected}
    response = client.post(reverse(CHANGELIST) + query, data)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    body = b"".join(getattr(response, "streaming_content")).decode()  # noqa: B009 (not in the stubs)
    return list(csv.DictReader(io.StringIO(body)))


# --- Nobody may change the ledger ----------------------------------------------------------


@pytest.mark.django_db
def test_a_superuser_can_neither_add_nor_change_nor_delete_a_payout(admin_client, paid):
    payout = Payout.objects.first()
    assert payout is not None
    before = list(Payout.objects.order_by("id").values_list("id", "gross", "commission", "net"))
    change = reverse("admin:payouts_payout_change", args=[payout.pk])

    assert admin_client.get(reverse("admin:payouts_payout_add")).status_code == 403
    assert admin_client.post(reverse("admin:payouts_payout_add"), {"gross": "1.00"}).status_code == 403
    assert admin_client.post(change, {"gross": "0.00", "commission": "0.00", "net": "0.00"}).status_code == 403
    delete = reverse("admin:payouts_payout_delete", args=[payout.pk])
    assert admin_client.get(delete).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "post": "yes", "index": 0, ACTION_CHECKBOX_NAME: [payout.pk]}
    admin_client.post(reverse(CHANGELIST), bulk)

    page = admin_client.get(change)
    assert page.status_code == 200  # looking is allowed
    assert page.context["has_change_permission"] is False
    assert b'name="_save"' not in page.content
    assert list(Payout.objects.order_by("id").values_list("id", "gross", "commission", "net")) == before


@pytest.mark.django_db
def test_staff_with_only_the_view_permission_can_look_and_export(paid):
    user = User.objects.create_user("auditor", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_payout"))
    client = Client()
    client.force_login(user)
    assert client.get(reverse(CHANGELIST)).status_code == 200
    assert len(export(client)) == Payout.objects.count()
    assert client.get(reverse("admin:payouts_payout_add")).status_code == 403


# --- Filters, totals, the run, the orders ------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?restaurant__timezone=Europe/London", {"restaurant__timezone": "Europe/London"}),
        ("?week=2027-03-08", {"week_start_local": "2027-03-08"}),
        ("?restaurant__timezone=Asia/Kolkata&week=2027-03-15", {"restaurant__timezone": "Asia/Kolkata"}),
        ("?period_start__year=2027&period_start__month=3", {"period_start__month": 3}),
        ("?q=Camden", {"restaurant__name": "Camden Kitchen"}),
    ],
)
def test_the_filters_select_the_expected_payouts(admin_client, paid, query, expected):
    response = admin_client.get(reverse(CHANGELIST) + query)
    assert response.status_code == 200
    shown = {p.pk for p in response.context["cl"].queryset}
    wanted = Payout.objects.filter(**expected)
    if "week=2027-03-15" in query:
        wanted = wanted.filter(week_start_local="2027-03-15")
    assert shown == set(wanted.values_list("pk", flat=True)) != set()


@pytest.mark.django_db
def test_the_restaurant_filter_and_a_malformed_week(admin_client, paid):
    camden = paid[2]
    response = admin_client.get(reverse(CHANGELIST) + f"?restaurant={camden.pk}")
    assert {p.restaurant_id for p in response.context["cl"].queryset} == {camden.pk}
    assert admin_client.get(reverse(CHANGELIST) + "?week=not-a-date").context["cl"].result_count == 0


@pytest.mark.django_db
def test_the_totals_are_those_of_every_filtered_payout(admin_client, paid):
    response = admin_client.get(reverse(CHANGELIST) + "?restaurant__timezone=Europe/London")
    totals = response.context["payout_totals"]
    london = Payout.objects.filter(restaurant__timezone="Europe/London")
    assert totals.count == london.count() == 8
    assert totals.gross == sum(p.gross for p in london)
    assert totals.net == sum(p.net for p in london)
    assert f"gross <strong>{money_text(totals.gross)}</strong>" in response.content.decode()


@pytest.mark.django_db
def test_the_totals_and_the_covered_orders_print_money_as_the_commands_do(admin_client, catering):
    listing = admin_client.get(reverse(CHANGELIST) + f"?restaurant={catering.pk}").content.decode()
    totals = " ".join(listing.split())
    payout = Payout.objects.get(restaurant=catering, order_count=2)
    assert (payout.gross, money_text(payout.gross)) == (Decimal("24691.35"), "24,691.35")
    assert (
        f"gross <strong>24,691.35</strong>, commission <strong>{money_text(payout.commission)}</strong>, "
        f"net <strong>{money_text(payout.net)}</strong>."
    ) in totals
    page = admin_client.get(reverse("admin:payouts_payout_change", args=[payout.pk])).content.decode()
    assert re.findall(r"</a>: ([\d,.]+) delivered", page) == ["12,345.67", "12,345.68"]


@pytest.mark.django_db
def test_the_list_and_the_page_print_each_payouts_amounts_with_separators_and_sort_by_them(admin_client, catering):
    payout = Payout.objects.get(restaurant=catering, order_count=2)
    assert (payout.gross, payout.commission, payout.net) == (
        Decimal("24691.35"),
        Decimal("3703.70"),
        Decimal("20987.65"),
    )
    listing = admin_client.get(reverse(CHANGELIST) + f"?restaurant={catering.pk}&o=-3").content.decode()
    cells = re.findall(r'<td class="field-(gross|commission|net)_text">([^<]*)</td>', listing)
    # Sorted by gross, largest first: the catering week leads, the empty weeks follow.
    assert cells[:3] == [("gross", "24,691.35"), ("commission", "3,703.70"), ("net", "20,987.65")]
    assert cells[3:] == [(column, "0.00") for _ in range(3) for column in ("gross", "commission", "net")]
    ascending = admin_client.get(reverse(CHANGELIST) + f"?restaurant={catering.pk}&o=3").content.decode()
    assert re.findall(r'<td class="field-gross_text">([^<]*)</td>', ascending)[-1] == "24,691.35"

    page = admin_client.get(reverse("admin:payouts_payout_change", args=[payout.pk])).content.decode()
    shown = dict(re.findall(r'<label>(Gross|Commission|Net):</label>\s*<div class="readonly">([^<]*)</div>', page))
    assert shown == {"Gross": "24,691.35", "Commission": "3,703.70", "Net": "20,987.65"}


@pytest.mark.django_db
def test_the_list_links_each_payout_to_its_run_and_the_page_lists_the_orders_it_covers(admin_client, paid):
    payout = Payout.objects.filter(order_count__gt=0).first()
    assert payout is not None and payout.job_run_id is not None
    listing = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert reverse("admin:scheduling_jobrun_change", args=[payout.job_run_id]) in listing

    page = admin_client.get(reverse("admin:payouts_payout_change", args=[payout.pk])).content.decode()
    assert (
        f"{payout.order_count} delivered orders fall inside this week ({payout.order_count} when it was paid)" in page
    )
    orders = admin_client.get(
        reverse("admin:orders_order_changelist"),
        {
            "restaurant__id__exact": payout.restaurant_id,
            "status__exact": "delivered",
            "delivered_at__gte": payout.period_start.isoformat(),
            "delivered_at__lt": payout.period_end.isoformat(),
        },
    )
    assert orders.status_code == 200
    assert sum(o.total for o in orders.context["cl"].queryset) == payout.gross


@pytest.mark.django_db
def test_the_list_leads_with_restaurant_local_week_and_money_and_labels_utc(admin_client, paid):
    response = admin_client.get(reverse(CHANGELIST) + "?restaurant=" + str(paid[0].pk))
    page = response.content.decode()
    columns = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', page)
    assert columns == [
        "restaurant_link",
        "local_week",
        "gross_text",
        "commission_text",
        "net_text",
        "orders",
        "utc_bounds",
        "run_link",
    ]
    # Dosa Darbar's first week in Kolkata begins at 18:30 UTC on the Sunday before.
    assert 'Mon 01 Mar 2027</span> <span class="zone">(Asia/Kolkata)</span>' in page
    assert "2027-02-28 18:30 to 2027-03-07 18:30 UTC" in page


@pytest.mark.django_db
def test_a_payout_is_titled_by_its_restaurant_and_local_week(admin_client, paid):
    payout = Payout.objects.filter(restaurant=paid[0]).order_by("period_start").first()
    assert payout is not None
    page = admin_client.get(reverse("admin:payouts_payout_change", args=[payout.pk])).content.decode()
    assert "<h2>Dosa Darbar, week of Mon 01 Mar 2027</h2>" in page
    assert "2027-02-28 18:30 to 2027-03-07 18:30 UTC" in page


# --- CSV export ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_csv_export_returns_exactly_the_filtered_rows(admin_client, paid):
    rows = export(admin_client, "?restaurant__timezone=Europe/London&week=2027-03-15")
    wanted = Payout.objects.filter(restaurant__timezone="Europe/London", week_start_local="2027-03-15")
    assert sorted(int(row["payout_id"]) for row in rows) == sorted(wanted.values_list("pk", flat=True))
    assert len(rows) == 2
    by_id = {p.pk: p for p in wanted}
    for row in rows:
        payout = by_id[int(row["payout_id"])]
        assert (Decimal(row["gross"]), Decimal(row["commission"]), Decimal(row["net"])) == (
            payout.gross,
            payout.commission,
            payout.net,
        )
        assert row["job_run_id"] == str(payout.job_run_id)


@pytest.mark.django_db
def test_the_csv_export_of_a_selection_has_the_header_and_only_those_rows(admin_client, paid):
    chosen = list(Payout.objects.order_by("id").values_list("pk", flat=True)[:3])
    rows = export(admin_client, selected=chosen)
    assert list(rows[0].keys()) == list(CSV_HEADER)
    assert [int(row["payout_id"]) for row in rows] == sorted(
        chosen, key=lambda pk: (Payout.objects.get(pk=pk).period_start, Payout.objects.get(pk=pk).restaurant_id)
    )


@pytest.mark.django_db
def test_the_csv_export_defuses_names_a_spreadsheet_would_run(admin_client, paid):
    rows = export(admin_client, "?restaurant__timezone=Europe/London")
    assert {row["restaurant"] for row in rows} == {"'=HYPERLINK(evil)", "Camden Kitchen"}
