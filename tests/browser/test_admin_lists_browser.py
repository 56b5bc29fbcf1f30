"""The admin lists on a 1,280 x 800 laptop: the payout list's money columns are on screen
without scrolling, and the job runs, schedules, orders and carts lists fit its width."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from carts.models import Cart
from orders.models import OrderStatus
from scheduling.execution import runs_execute
from scheduling.models import JobRun, RunStatus, Trigger
from scheduling.schedules import schedules_register
from scheduling.services import run_claim_manual
from tests.browser.conftest import VIEWPORT
from tiffin import clock

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MONEY = ("gross_text", "commission_text", "net_text")


@pytest.fixture
def paid(restaurant_factory: Any, order_factory: Any) -> None:
    """Three weeks of payouts for restaurants in three zones, names as long as real ones."""
    now = clock.now()
    onboarded = now - timedelta(days=22)
    for name, zone in (
        ("The Great Bombay Biryani & Kebab House", "Asia/Kolkata"),
        ("Queens Dumpling Co", "America/New_York"),
        ("Camden Kitchen", "Europe/London"),
    ):
        restaurant = restaurant_factory(name=name, timezone=zone, onboarded_at=onboarded)
        for day in range(0, 20, 3):
            placed_at = onboarded + timedelta(days=day, hours=3)
            order_factory(OrderStatus.DELIVERED, restaurant=restaurant, total=Decimal("1234.56"), placed_at=placed_at)
    run = run_claim_manual(job_name="weekly-payouts", scheduled_for=now, now=now, enqueue=False)
    assert run is not None
    runs_execute(run_ids=[run.id], worker="browser-test")


@pytest.fixture
def runs() -> None:
    """Every schedule, and runs of each trigger and outcome, subjects as long as real ones."""
    now = clock.now()
    schedules_register(now=now - timedelta(days=2))
    for n, (job, subject, trigger, status) in enumerate(
        [
            ("cancel-stale-order", "order:1234567", Trigger.DELAYED, RunStatus.SUCCEEDED),
            ("weekly-payouts", "restaurants:1-3,7,12-19", Trigger.MANUAL, RunStatus.SUCCEEDED),
            ("clean-carts", "", Trigger.BACKFILL, RunStatus.SKIPPED),
            ("cancel-stale-orders", "", Trigger.CRON, RunStatus.DEAD),
            ("check-missed-runs", "", Trigger.CRON, RunStatus.ABANDONED),
        ]
    ):
        tick = (now - timedelta(days=1, minutes=n)).replace(second=0, microsecond=0)
        JobRun.objects.create(
            job_name=job,
            subject=subject,
            scheduled_for=tick,
            due_at=tick,
            status=status,
            trigger=trigger,
            created_at=tick,
            attempts=3,
            fence=123456 + n,
            worker="worker-7.example.internal:123456",
            started_at=tick + timedelta(minutes=4),
            finished_at=tick + timedelta(minutes=5, seconds=12),
        )


@pytest.fixture
def shopping(order_factory: Any) -> None:
    now = clock.now()
    for status in OrderStatus:
        order_factory(status, placed_at=now - timedelta(hours=1))
    Cart.objects.create(customer_ref="cust-000123456789", created_at=now, updated_at=now)


@pytest.fixture
def logged_in(page: Any, live_server: Any) -> Any:
    """The browser with a superuser's session cookie (no password to hash, no login page)."""
    client = Client()
    client.force_login(User.objects.create(username="ops", is_staff=True, is_superuser=True))
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
    return page


def _on_screen(page: Any, selector: str) -> list[dict[str, float]]:
    """The boxes of the matching elements, in viewport coordinates, at scroll (0, 0)."""
    page.evaluate("window.scrollTo(0, 0)")
    boxes: list[dict[str, float]] = page.eval_on_selector_all(
        selector, "els => els.map(e => e.getBoundingClientRect().toJSON())"
    )
    return boxes


def _fits(page: Any) -> None:
    """No horizontal scrolling: neither the page nor the list's own box scrolls."""
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
    results = page.locator("#changelist .results")
    assert results.evaluate("el => el.scrollWidth <= el.clientWidth"), "the list scrolls sideways"
    headers = _on_screen(page, "#result_list thead th")
    assert headers and all(box["left"] >= 0 and box["right"] <= VIEWPORT["width"] for box in headers), headers


def test_the_payout_lists_money_columns_are_on_screen_without_scrolling(logged_in, paid):
    page = logged_in
    page.goto("/admin/payouts/payout/")
    columns = page.locator("#result_list thead th").evaluate_all("ths => ths.map(th => th.className)")
    order = [next(c.removeprefix("column-") for c in cls.split() if c.startswith("column-")) for cls in columns[1:]]
    assert order[:6] == ["restaurant_link", "local_week", *MONEY, "orders"]
    _fits(page)
    for column in MONEY:
        cells = _on_screen(
            page, f"#result_list th.column-{column}, #result_list tbody tr:first-child td.field-{column}"
        )
        assert len(cells) == 2
        for box in cells:
            assert box["left"] >= 0 and box["right"] <= VIEWPORT["width"], (column, box)
            assert box["top"] >= 0 and box["bottom"] <= VIEWPORT["height"], (column, box)
        aligned = page.locator(f"#result_list tbody tr:first-child td.field-{column}").evaluate(
            "td => getComputedStyle(td).textAlign"
        )
        assert aligned == "right", (column, aligned)
    grosses = page.locator("#result_list td.field-gross_text").all_inner_texts()
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})*\.\d\d", gross) for gross in grosses), grosses
    assert any("," in gross for gross in grosses), grosses  # weeks of 1,234.56 orders
    first = page.locator("#result_list tbody tr").first
    assert "UTC" in first.locator("td.field-utc_bounds").inner_text()


def test_the_engines_lists_fit_the_width_and_a_manual_run_shows_no_lateness(logged_in, runs):
    page = logged_in
    for path in ("/admin/scheduling/jobrun/", "/admin/scheduling/schedule/"):
        page.goto(path)
        _fits(page)
    page.goto("/admin/scheduling/jobrun/?job_name=weekly-payouts")
    row = page.locator("#result_list tbody tr").first
    assert row.locator("td.field-late_by").inner_text() == "- (by hand)"
    assert row.locator("td.field-scheduled_for").inner_text().endswith(" UTC")


def test_the_shops_lists_fit_the_width(logged_in, shopping):
    page = logged_in
    for path in ("/admin/orders/order/", "/admin/carts/cart/", "/admin/orders/restaurant/"):
        page.goto(path)
        _fits(page)
