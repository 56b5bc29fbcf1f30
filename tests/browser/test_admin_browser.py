"""The operator's path through the admin in a real browser at 1,280 x 800: log in, read
the dashboard's timeline, pause and resume a job and land back at it, explain a cron
expression (logged in or not, live as it is typed) and get a field error for a malformed
one. The dashboard and explainer screenshots in docs/ come from these tests."""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

from scheduling import cron
from scheduling.models import JobRun, RunStatus, Schedule, SkipReason, Trigger
from scheduling.registry import Job, registry
from scheduling.schedules import schedules_register
from tests.browser.conftest import DOCS, VIEWPORT
from tiffin import clock

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-browser-test-password"
WATCHED = "check-missed-runs"  # the engine's own job: always declared
DEAD_ERROR = "Traceback (most recent call last):\n...\nConnectionError: upstream timed out"


def _jitter(key: str, low: float, high: float) -> float:
    """A stable pseudo-random number for one run (the screenshots do not change per run)."""
    return low + (zlib.crc32(key.encode()) % 1000) / 1000 * (high - low)


def _history_of(job: Job, now: datetime) -> list[JobRun]:
    """A week of one job's runs: on time but for a three-hour outage (missed ticks, then
    a late one) 20 hours ago, a dead run 30 hours ago and a skipped one 40 hours ago (all
    inside an hourly job's fitted timeline of about two days)."""
    ticks = cron.ticks_between(job.cron, job.timezone, now - timedelta(days=7), now - timedelta(minutes=2))
    outage = (now - timedelta(hours=20), now - timedelta(hours=17))
    after_outage = next((t for t in ticks if t >= outage[1]), None)
    dead = min(ticks, key=lambda t: abs(t - (now - timedelta(hours=30))), default=None)
    skipped = min(ticks, key=lambda t: abs(t - (now - timedelta(hours=40))), default=None)
    runs = []
    for tick in ticks:
        if outage[0] <= tick < outage[1]:
            continue
        key = f"{job.name}{tick.isoformat()}"
        late = timedelta(minutes=7) if tick == after_outage else timedelta(seconds=_jitter(key, 0.2, 20))
        status = RunStatus.DEAD if tick == dead else RunStatus.SKIPPED if tick == skipped else RunStatus.SUCCEEDED
        runs.append(_run(job, tick, status, started=tick + late, took=_jitter(key + "d", 1, 40)))
    return runs


def _run(job: Job, tick: datetime, status: RunStatus, *, started: datetime, took: float) -> JobRun:
    skipped = status == RunStatus.SKIPPED
    return JobRun(
        job_name=job.name,
        scheduled_for=tick,
        due_at=tick,
        status=status,
        trigger=Trigger.CRON,
        created_at=tick,
        enqueued_at=tick,
        attempts=0 if skipped else job.max_attempts if status == RunStatus.DEAD else 1,
        fence=None if skipped else int(tick.timestamp()) // 60,
        started_at=None if skipped else started,
        heartbeat_at=None if skipped else started,
        finished_at=started + timedelta(seconds=took),
        skip_reason=SkipReason.OVERLAP if skipped else "",
        error=DEAD_ERROR if status == RunStatus.DEAD else "",
    )


@pytest.fixture
def history() -> None:
    """Every declared cron job, registered eight days ago, with a week of runs."""
    now = clock.now()
    schedules_register(now=now - timedelta(days=8))
    for job in registry.cron_jobs():
        JobRun.objects.bulk_create(_history_of(job, now), batch_size=1000)


@pytest.fixture
def logged_in(page: Any) -> Any:
    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    page.goto("/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#operations-module")
    return page


def _job_section(page: Any, name: str) -> Any:
    return page.locator(f'section.job[id="job-{name}"]')


def test_the_dashboard_shows_each_jobs_timeline_with_missed_and_late_runs(logged_in, history):
    page = logged_in
    page.click("#operations-module >> text=Schedules dashboard")
    page.wait_for_selector("svg.timeline")
    timeline = page.locator(f'svg.timeline[data-job="{WATCHED}"]')
    assert timeline.is_visible()
    assert timeline.locator("rect.slot.missed").count() == 3  # the three-hour outage
    assert timeline.locator("rect.run.late").count() == 1
    assert timeline.locator("rect.run.dead").count() == 1
    assert timeline.locator("rect.run.succeeded").count() > 40  # about two days of hourly ticks
    title = timeline.locator("rect.run.late title").first.text_content()
    assert "started 7 min late" in title
    assert _job_section(page, WATCHED).locator(".recent .status.succeeded").count() >= 1
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
    DOCS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS / "dashboard.png"), full_page=True)
    page.click("text=7 days")  # the same span for every job
    page.wait_for_url("**/dashboard/?days=7")
    page.wait_for_selector("svg.timeline")
    week = page.locator(f'svg.timeline[data-job="{WATCHED}"]')
    assert week.locator("rect.run.succeeded").count() > 150


def test_an_operator_pauses_and_resumes_a_job_from_the_dashboard(logged_in, history):
    page = logged_in
    page.goto("/admin/scheduling/schedule/dashboard/")
    _job_section(page, WATCHED).locator("button", has_text="Pause").click()
    page.wait_for_selector(f"text={WATCHED} paused.")
    # Back at the job, not the top of the page, with the confirmation in its section.
    assert page.url.endswith(f"#job-{WATCHED}")
    assert _job_section(page, WATCHED).locator("ul.messagelist", has_text=f"{WATCHED} paused.").is_visible()
    assert page.evaluate("window.scrollY") > 0
    assert _job_section(page, WATCHED).locator(".badge.paused").is_visible()
    assert Schedule.objects.get(job_name=WATCHED).paused_by == "ops"
    _job_section(page, WATCHED).locator("button", has_text="Resume").click()
    page.wait_for_selector(f"text={WATCHED} resumed.")
    assert _job_section(page, WATCHED).locator(".badge.paused").count() == 0
    assert Schedule.objects.get(job_name=WATCHED).paused is False
    assert [e.get_change_message() for e in LogEntry.objects.order_by("id")] == ["Paused", "Resumed"]


def _explain(page: Any, expression: str, zone: str = "UTC") -> None:
    page.fill("#id_expression", expression)
    page.fill("#id_zone", zone)
    page.click("input[type=submit][value=Explain]")


def test_the_explainer_warns_that_the_day_fields_combine_with_or_and_lists_fire_times(logged_in):
    page = logged_in
    page.click("#operations-module >> text=Cron explainer")
    _explain(page, "0 0 13 * 5", zone="America/New_York")
    warning = page.locator('#warnings li[data-code="day-or"]')
    assert "combine with OR" in warning.inner_text()
    fires = page.locator("#fire-times tr.fire")
    assert fires.count() == 5
    local = [fires.nth(i).locator("td").nth(2).inner_text() for i in range(5)]  # "Fri 2027-03-05 00:00 EST"
    assert all(text.startswith("Fri") or text[12:14] == "13" for text in local), local
    assert all(text.endswith(("00:00 EST", "00:00 EDT")) for text in local), local
    DOCS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS / "explainer.png"), full_page=True)


def test_a_malformed_expression_gets_a_field_level_error(logged_in):
    page = logged_in
    page.goto("/admin/scheduling/schedule/explain/")  # the admin's old address leads to the page
    _explain(page, "0 25 * * *")
    error = page.locator(".field-expression ul.errorlist")
    assert "hour field '25'" in error.inner_text()
    assert page.locator(".field-expression table.typed td.bad").inner_text() == "25"
    assert page.locator("#explanation").count() == 0
    assert page.locator("#id_expression").input_value() == "0 25 * * *"  # kept, to correct it


def test_an_anonymous_visitor_sees_the_explanation_change_as_the_expression_is_typed(page):
    page.goto("/cron/")
    assert page.locator("#user-tools").count() == 0  # nobody is logged in
    page.locator("#id_expression").press_sequentially("0 9 * * 1-5", delay=20)
    page.wait_for_selector("#explanation")  # no button pressed
    assert "Monday to Friday" in page.locator("#explanation").inner_text()
    assert page.locator("#fire-times tr.fire").count() == 5
    # Typing on changes the answer: a sixth field is the seconds-first trap, pointed at.
    page.locator("#id_expression").press_sequentially(" ?", delay=20)
    page.wait_for_selector("#errors-expression ul.errorlist")
    assert "seconds-first" in page.locator("#errors-expression").inner_text()
    assert page.locator("#explanation").count() == 0
    # Back to five fields in another zone: explained again, and the address is shareable.
    page.locator("#id_expression").fill("30 2 * * *")
    page.locator("#id_zone").fill("Europe/London")
    page.wait_for_function("document.querySelectorAll('#fire-times tr.fire').length === 5")
    page.wait_for_function("location.search.includes('Europe%2FLondon')")
    assert "expression=30+2+" in page.url
    local = page.locator("#fire-times tr.fire td:nth-child(3)").all_inner_texts()
    assert len(local) == 5 and all(text.endswith(("02:30 GMT", "02:30 BST")) for text in local), local
