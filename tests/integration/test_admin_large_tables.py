"""The admin lists on a large table: counted up to a limit (the rest is an estimate, and
says so), filters from fixed choices, a date drill-down from the calendar, and no query
that reads the whole table (no COUNT(*) without a LIMIT, no DISTINCT, no unbounded SELECT).

The limit is lowered to a handful of rows here, so "more rows than the limit" is a few
rows and the tests run on PostgreSQL and SQLite alike.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduling.models import JobRun, RunStatus, SkipReason, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.admin_pages import ADMIN_PAGES
from tests.engine import make_job
from tiffin.admin_lists import BoundedPaginator

pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

HOURLY = make_job("hourly-report", cron="0 * * * *")
DELAYED = make_job("cancel-one", delayed=True)
NOW = datetime(2027, 3, 5, 12, 0, tzinfo=UTC)
RUNS = "admin:scheduling_jobrun_changelist"
LIMIT = 5
PER_PAGE = 2


@pytest.fixture(autouse=True)
def jobs(monkeypatch):
    # A limit of a few rows, and pages of two: "more than the limit" is a handful of rows.
    monkeypatch.setattr(BoundedPaginator, "limit", LIMIT)
    for model_admin in admin.site._registry.values():
        monkeypatch.setattr(model_admin, "list_per_page", PER_PAGE)
    with registry.replaced(*registry.all(), HOURLY, DELAYED), time_machine.travel(NOW, tick=False):
        schedules_register(now=NOW - timedelta(days=30))
        yield


def _runs(count, *, start=NOW - timedelta(hours=1), step=timedelta(hours=-1), **fields):
    """``count`` finished runs of HOURLY, newest first from ``start``."""
    values = {"status": RunStatus.SUCCEEDED, "trigger": Trigger.CRON, "attempts": 1}
    values.update(fields)
    runs = []
    for n in range(count):
        when = start + n * step
        runs.append(
            JobRun(job_name=HOURLY.name, scheduled_for=when, due_at=when, created_at=when, finished_at=when, **values)
        )
    return JobRun.objects.bulk_create(runs)


def _text(response):
    return re.sub(r"\s+", " ", response.content.decode())


def _job_runs_queries(queries):
    return [q["sql"] for q in queries if '"job_runs"' in q["sql"]]


# --- The count ------------------------------------------------------------------------------


def test_a_list_within_the_limit_shows_the_exact_count(admin_client):
    _runs(3)
    response = admin_client.get(reverse(RUNS))
    assert response.status_code == 200
    assert response.context["cl"].result_count == 3
    assert "3 job runs" in _text(response)
    assert "more than" not in _text(response)


def test_beyond_the_limit_the_list_says_more_than_and_labels_the_estimate(admin_client):
    _runs(LIMIT + 3)
    response = admin_client.get(reverse(RUNS))
    cl = response.context["cl"]
    assert cl.paginator.truncated
    assert cl.result_count == LIMIT  # counted no further than the limit
    assert f"more than {LIMIT} job runs" in _text(response)
    if connection.vendor == "postgresql":
        assert cl.paginator.estimate is not None
        assert f"(about {cl.paginator.estimate_rounded}: the database's estimate, not a count)" in _text(response)
    else:
        assert cl.paginator.estimate is None
        assert "estimate" not in _text(response)


def test_the_pages_stop_at_the_limit(admin_client):
    _runs(LIMIT + 3)
    last = (LIMIT + PER_PAGE - 1) // PER_PAGE
    response = admin_client.get(reverse(RUNS))
    assert response.context["cl"].paginator.num_pages == last
    assert admin_client.get(reverse(RUNS) + f"?p={last}").status_code == 200
    # One page further would need an OFFSET past the limit: Django's "invalid page" redirect.
    beyond = admin_client.get(reverse(RUNS) + f"?p={last + 1}")
    assert beyond.status_code == 302
    assert beyond["Location"].endswith("?e=1")


@pytest.mark.parametrize(
    "query",
    [
        "",
        f"?job_name={HOURLY.name}",
        "?status__exact=succeeded",
        "?status__exact=enqueued",
        "?trigger__exact=manual",
        "?skip_reason=overlap",
        "?scheduled_for__year=2027&scheduled_for__month=3&scheduled_for__day=4",
        "?scheduled_for__year=2027&scheduled_for__month=3",
        "?scheduled_for__year=2027",
    ],
)
def test_no_query_of_the_job_runs_list_reads_the_whole_table(admin_client, query):
    _runs(LIMIT + 3)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(RUNS) + query)
    assert response.status_code == 200
    statements = _job_runs_queries(captured.captured_queries)
    assert statements, "the list read nothing from job_runs"
    for sql in statements:
        upper = sql.upper()
        assert "DISTINCT" not in upper, sql
        if upper.startswith("EXPLAIN"):
            continue  # planned, never run
        if "COUNT(" in upper:
            assert "LIMIT" in upper, f"a COUNT with no LIMIT: {sql}"
            continue
        # Without a LIMIT only the page of a list the count found to fit on it.
        one_page = response.context["cl"].result_count <= PER_PAGE
        bounded = "LIMIT" in upper or upper.startswith('SELECT MIN("JOB_RUNS"."SCHEDULED_FOR")') or one_page
        assert bounded, f"an unbounded SELECT: {sql}"


# --- The filters ----------------------------------------------------------------------------


def _filter_choices(response, title):
    spec = next(spec for spec in response.context["cl"].filter_specs if spec.title == title)
    return [choice["display"] for choice in spec.choices(response.context["cl"])]


def test_the_job_filter_lists_exactly_the_declared_jobs(admin_client):
    _runs(2)
    # A row of a job no longer declared: a DISTINCT over job_runs would list it.
    _runs(1, start=NOW - timedelta(days=3), subject="gone")
    JobRun.objects.filter(subject="gone").update(job_name="renamed-long-ago")
    response = admin_client.get(reverse(RUNS))
    assert _filter_choices(response, "job") == ["All", *sorted(job.name for job in registry.all())]


def test_the_enqueued_filter_lists_the_enqueued_runs_through_their_index(admin_client):
    _runs(2)
    waiting = _runs(2, start=NOW + timedelta(hours=2), status=RunStatus.ENQUEUED, enqueued_at=NOW)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(RUNS) + "?status__exact=enqueued")
    assert {run.id for run in response.context["cl"].result_list} == {run.id for run in waiting}
    # The condition of job_run_enqueued_since, so that index serves it (scheduling.models).
    listed = [sql for sql in _job_runs_queries(captured.captured_queries) if "ORDER BY" in sql]
    assert listed and all('"enqueued_at" IS NOT NULL' in sql for sql in listed), listed


def test_the_skip_reason_filter_finds_skipped_runs_of_that_reason_only(admin_client):
    _runs(2, status=RunStatus.SKIPPED, skip_reason=SkipReason.OVERLAP)
    _runs(1, start=NOW - timedelta(days=2), status=RunStatus.SKIPPED, skip_reason=SkipReason.PAUSED)
    _runs(2, start=NOW - timedelta(days=3))
    response = admin_client.get(reverse(RUNS) + "?skip_reason=overlap")
    rows = list(response.context["cl"].result_list)
    assert len(rows) == 2
    assert {(run.status, run.skip_reason) for run in rows} == {(RunStatus.SKIPPED, SkipReason.OVERLAP)}
    assert _filter_choices(response, "skip reason") == ["All", *[label for _, label in SkipReason.choices]]


# --- The date drill-down --------------------------------------------------------------------


def _drill_down_choices(response):
    # The rendered drill-down: the links of the "xfull" navigation list.
    nav = re.search(r'<nav class="toplinks">(.*?)</nav>', response.content.decode(), re.S)
    assert nav, "no date drill-down rendered"
    return [{"title": title.strip()} for title in re.findall(r"<a [^>]*>([^<]+)</a>", nav.group(1))]


def test_the_drill_down_offers_every_calendar_day_between_the_first_and_last_run(admin_client):
    _runs(1, start=datetime(2027, 3, 1, 9, 0, tzinfo=UTC))
    _runs(1, start=datetime(2027, 3, 5, 9, 0, tzinfo=UTC))
    response = admin_client.get(reverse(RUNS))
    titles = [choice["title"] for choice in _drill_down_choices(response)]
    # One month between the first and last run: the days, 2 to 4 included though empty.
    assert [t for t in titles if t.startswith("March ")] == [f"March {d}" for d in range(1, 6)]


def test_the_drill_down_lists_the_years_then_the_months_between_the_first_and_last_run(admin_client):
    _runs(1, start=datetime(2025, 6, 1, tzinfo=UTC))
    _runs(1, start=datetime(2025, 9, 30, tzinfo=UTC))
    _runs(1, start=datetime(2027, 3, 1, tzinfo=UTC))
    response = admin_client.get(reverse(RUNS))
    assert [choice["title"] for choice in _drill_down_choices(response)] == ["2025", "2026", "2027"]
    year = admin_client.get(reverse(RUNS) + "?scheduled_for__year=2025")
    months = [choice["title"] for choice in _drill_down_choices(year)]
    assert months == ["&lsaquo; All dates", "June 2025", "July 2025", "August 2025", "September 2025"]


def test_a_day_of_the_drill_down_lists_that_days_runs_newest_first(admin_client):
    _runs(3, start=datetime(2027, 3, 4, 20, 0, tzinfo=UTC))
    _runs(2, start=datetime(2027, 3, 3, 20, 0, tzinfo=UTC))
    response = admin_client.get(reverse(RUNS) + "?scheduled_for__year=2027&scheduled_for__month=3&scheduled_for__day=4")
    rows = [run.scheduled_for for run in response.context["cl"].result_list]
    assert rows == [datetime(2027, 3, 4, h, 0, tzinfo=UTC) for h in (20, 19)]  # a page of two
    assert response.context["cl"].result_count == 3


# --- The other large lists ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "table"),
    [
        ("admin:orders_order_changelist", "orders_order"),
        ("admin:carts_cart_changelist", "carts_cart"),
        ("admin:payouts_payout_changelist", "payouts_payout"),
    ],
)
def test_the_orders_carts_and_payouts_lists_count_up_to_the_limit(admin_client, order_factory, name, table):
    from carts.services import cart_create

    for n in range(LIMIT + 2):
        order_factory(placed_at=NOW - timedelta(hours=n))
        cart_create(customer_ref=f"cust-{n}", now=NOW - timedelta(hours=n))
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(name))
    assert response.status_code == 200
    # The paginator's COUNT(*) (the payouts list's own totals are a SUM, not the paginator's).
    counts = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].upper().startswith("SELECT COUNT(*)") and f'"{table}"' in q["sql"]
    ]
    assert counts, "no count of the list"
    assert all("LIMIT" in sql.upper() for sql in counts), counts


def test_the_carts_list_counts_each_listed_carts_items_without_grouping_every_cart(admin_client):
    from decimal import Decimal

    from carts.services import cart_add_item, cart_create

    carts = [cart_create(customer_ref=f"cust-{n}", now=NOW - timedelta(hours=n)) for n in range(LIMIT + 2)]
    for cart, skus in zip(carts, (3, 0, 1), strict=False):
        for k in range(skus):
            cart_add_item(cart_id=cart.pk, sku=f"sku-{k}", quantity=2, unit_price=Decimal("1.50"), now=cart.updated_at)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse("admin:carts_cart_changelist"))
    listed = {cart.pk: cart.item_count for cart in response.context["cl"].result_list}
    assert listed == {carts[0].pk: 3, carts[1].pk: 0}  # newest first, a page of two; lines, not quantities
    page = [q["sql"] for q in captured.captured_queries if "carts_cartitem" in q["sql"] and "LIMIT" in q["sql"].upper()]
    assert page, "the page's query did not count items"
    for sql in page:
        # The count is a subquery per listed cart: no JOIN of the items to every cart, no GROUP BY of them.
        assert "GROUP BY" not in sql.upper().split('FROM "CARTS_CART"')[-1], sql
        assert "JOIN" not in sql.upper(), sql


def test_the_orders_list_is_newest_placed_first_with_a_drill_down_by_day(admin_client, order_factory):
    # Placed out of id order: newest first must follow placed_at, not the id.
    late = order_factory(placed_at=datetime(2027, 3, 4, 9, 0, tzinfo=UTC))
    early = order_factory(placed_at=datetime(2027, 3, 2, 9, 0, tzinfo=UTC))
    middle = order_factory(placed_at=datetime(2027, 3, 4, 8, 0, tzinfo=UTC))
    url = reverse("admin:orders_order_changelist")
    response = admin_client.get(url)
    assert [order.pk for order in response.context["cl"].result_list] == [late.pk, middle.pk]  # a page of two
    titles = [choice["title"] for choice in _drill_down_choices(response)]
    assert [t for t in titles if t.startswith("March ")] == ["March 2", "March 3", "March 4"]
    day = admin_client.get(url + "?placed_at__year=2027&placed_at__month=3&placed_at__day=2")
    assert [order.pk for order in day.context["cl"].result_list] == [early.pk]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("app", "migration"),
    [
        ("scheduling", "0007_history_read_indexes"),
        ("scheduling", "0008_prune_history_index"),
        ("orders", "0003_order_placed_at_index"),
    ],
)
def test_the_indexes_of_large_tables_are_built_concurrently_on_postgresql(app, migration):
    """A plain CREATE INDEX on job_runs or orders_order blocks every claim and order until it ends."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("sqlmigrate", app, migration, stdout=out)
    statements = [line for line in out.getvalue().splitlines() if line.upper().startswith("CREATE INDEX")]
    assert statements, out.getvalue()
    assert all("CREATE INDEX CONCURRENTLY" in line.upper() for line in statements), statements
    assert "BEGIN;" not in out.getvalue()  # CONCURRENTLY cannot run in a transaction
