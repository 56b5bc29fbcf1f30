"""The scheduling admin: read-only job runs and schedules, the operator's actions through
the services (each logged with its user), their permissions (staff without them see
but cannot act, even by a forged POST), and the dashboard's timeline."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from operations.timeline import MISSED, PENDING, job_timeline, timeline_fitted_start
from scheduling.models import JobRun, JobRunEvent, RunStatus, Schedule, SkipReason, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.admin_pages import ADMIN_PAGES
from tests.engine import T0, make_job, queued_tasks

pytestmark = [pytest.mark.django_db, *ADMIN_PAGES]

HOURLY = make_job("hourly-report", cron="0 * * * *", timezone="Europe/Paris")
DELAYED = make_job("cancel-one", delayed=True)
NOW = T0 + timedelta(minutes=30)  # 2027-03-01 12:30 UTC
VIEW = ["view_schedule", "view_jobrun", "view_jobrunevent"]
ACT = ["pause_schedule", "run_schedule", "rerun_jobrun"]


@pytest.fixture(autouse=True)
def jobs():
    with registry.replaced(HOURLY, DELAYED), time_machine.travel(NOW, tick=False):
        schedules_register(now=NOW - timedelta(days=2))
        yield


def _staff(username, codenames):
    user = User.objects.create_user(username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer():
    return _staff("viewer", VIEW)


@pytest.fixture
def operator():
    return _staff("operator", VIEW + ACT)


def _schedule(name=HOURLY.name):
    return Schedule.objects.get(job_name=name)


def _run(when, status=RunStatus.SUCCEEDED, **fields):
    values = {
        "due_at": when,
        "trigger": Trigger.CRON,
        "created_at": when,
        "started_at": when + timedelta(seconds=3),
        "finished_at": when + timedelta(seconds=40),
        "attempts": 1,
        "fence": 7,
    }
    values.update(fields)
    return JobRun.objects.create(job_name=HOURLY.name, scheduled_for=when, status=status, **values)


def _act(client, action, pks, url="admin:scheduling_schedule_changelist", **extra):
    return client.post(reverse(url), {"action": action, "_selected_action": [str(pk) for pk in pks], **extra})


def _action_names(client, url):
    response = client.get(reverse(url))
    assert response.status_code == 200
    form = response.context.get("action_form")
    return {name for name, _ in form.fields["action"].choices} if form else set()


# --- Permissions ------------------------------------------------------------------------


def test_staff_without_the_permissions_see_the_pages_but_no_actions(viewer):
    assert _action_names(viewer, "admin:scheduling_schedule_changelist") <= {""}
    assert _action_names(viewer, "admin:scheduling_jobrun_changelist") <= {""}
    dashboard = viewer.get(reverse("admin:scheduling_dashboard"))
    assert dashboard.status_code == 200
    assert b"hourly-report" in dashboard.content
    assert b'value="pause_schedules"' not in dashboard.content
    assert b'value="run_now"' not in dashboard.content


def test_the_operator_sees_every_action(operator):
    assert {"pause_schedules", "resume_schedules", "run_now", "backfill"} <= _action_names(
        operator, "admin:scheduling_schedule_changelist"
    )
    assert "rerun_runs" in _action_names(operator, "admin:scheduling_jobrun_changelist")
    dashboard = operator.get(reverse("admin:scheduling_dashboard"))
    assert b'value="pause_schedules"' in dashboard.content and b'value="run_now"' in dashboard.content


@pytest.mark.parametrize("url", ["admin:scheduling_schedule_changelist", "admin:scheduling_dashboard"])
def test_a_forged_post_without_the_permissions_pauses_and_runs_nothing(viewer, url):
    pk = _schedule().pk
    for action in ("pause_schedules", "run_now", "backfill"):
        response = _act(viewer, action, [pk], url=url, apply="1", start="2027-03-01 00:00", end="2027-03-01 06:00")
        assert response.status_code in (200, 302)
    assert _schedule().paused is False
    assert not JobRun.objects.exists()
    assert not LogEntry.objects.exists()


def test_a_forged_rerun_without_the_permission_leaves_the_dead_run_dead(viewer):
    run = _run(T0, RunStatus.DEAD)
    _act(viewer, "rerun_runs", [run.pk], url="admin:scheduling_jobrun_changelist")
    run.refresh_from_db()
    assert run.status == RunStatus.DEAD
    assert not JobRunEvent.objects.exists()


def test_pause_permission_alone_does_not_allow_running(client):
    pauser = _staff("pauser", [*VIEW, "pause_schedule"])
    assert "run_now" not in _action_names(pauser, "admin:scheduling_schedule_changelist")
    _act(pauser, "run_now", [_schedule().pk])
    assert not JobRun.objects.exists()


# --- Actions, through the services, logged with the user --------------------------------


def _log_messages(obj):
    return [entry.get_change_message() for entry in LogEntry.objects.filter(object_id=str(obj.pk)).order_by("id")]


def test_pause_and_resume_are_logged_with_the_operator(operator):
    schedule = _schedule()
    _act(operator, "pause_schedules", [schedule.pk])
    paused = _schedule()
    _act(operator, "resume_schedules", [schedule.pk])
    assert (paused.paused, paused.paused_by, paused.paused_at) == (True, "operator", NOW)
    assert _schedule().paused is False
    assert _log_messages(schedule) == ["Paused", "Resumed"]
    assert set(LogEntry.objects.values_list("user__username", "action_flag")) == {("operator", CHANGE)}


def test_run_now_claims_one_manual_run_at_the_current_minute_and_a_double_submit_runs_nothing(operator):
    schedule = _schedule()
    _act(operator, "run_now", [schedule.pk])
    second = _act(operator, "run_now", [schedule.pk], url="admin:scheduling_dashboard")
    [run] = JobRun.objects.all()
    assert (run.trigger, run.status, run.scheduled_for) == (Trigger.MANUAL, RunStatus.ENQUEUED, NOW)
    assert len(queued_tasks()) == 1
    assert second["Location"] == reverse("admin:scheduling_dashboard") + "?job=hourly-report#job-hourly-report"
    assert _log_messages(schedule) == [f"Run now by operator: run {run.pk} @ 2027-03-01 12:30 UTC"]


def test_run_now_refuses_a_delayed_job(operator):
    _act(operator, "run_now", [_schedule(DELAYED.name).pk])
    assert not JobRun.objects.exists()


def test_backfill_asks_for_a_range_then_claims_each_tick_through_the_claim_path(operator):
    schedule = _schedule()
    _run(T0.replace(hour=3))  # already claimed: left alone
    form = _act(operator, "backfill", [schedule.pk])
    assert form.status_code == 200
    assert b'name="start"' in form.content and b"hourly-report" in form.content
    done = _act(operator, "backfill", [schedule.pk], apply="1", start="2027-03-01 00:30", end="2027-03-01 05:00")
    assert done.status_code == 302
    backfilled = JobRun.objects.filter(trigger=Trigger.BACKFILL).order_by("scheduled_for")
    assert [r.scheduled_for.hour for r in backfilled] == [1, 2, 4, 5]
    assert _log_messages(schedule) == [
        "Backfilled 2027-03-01 00:30 to 2027-03-01 05:00 UTC: 4 new runs, to run one after another, oldest first "
        "(each starts once the one before it has finished)"
    ]
    assert {r.overlap for r in backfilled} == {"queue"}


def test_backfill_under_the_jobs_own_policy_says_what_that_policy_does(operator):
    schedule = _schedule()
    form = _act(operator, "backfill", [schedule.pk])
    assert b"One after another, oldest first" in form.content and b'value="policy"' in form.content
    done = _act(
        operator, "backfill", [schedule.pk], apply="1", start="2027-03-01 00:30", end="2027-03-01 02:00", order="policy"
    )
    assert done.status_code == 302
    assert _log_messages(schedule) == [
        "Backfilled 2027-03-01 00:30 to 2027-03-01 02:00 UTC: 2 new runs, started as workers take them under the "
        "job's overlap policy, allow: several may run at once"
    ]
    assert {r.overlap for r in JobRun.objects.filter(trigger=Trigger.BACKFILL)} == {""}


def test_backfill_from_the_dashboard_asks_for_the_range_there_and_returns_there(operator):
    url = reverse("admin:scheduling_dashboard")
    pk = _schedule().pk
    form = _act(operator, "backfill", [pk], url="admin:scheduling_dashboard")
    assert form.status_code == 200 and b'name="apply"' in form.content
    done = _act(
        operator,
        "backfill",
        [pk],
        url="admin:scheduling_dashboard",
        apply="1",
        start="2027-03-01 08:30",
        end="2027-03-01 10:00",
    )
    assert (done.status_code, done["Location"]) == (302, f"{url}?job=hourly-report#job-hourly-report")
    assert [r.scheduled_for.hour for r in JobRun.objects.order_by("scheduled_for")] == [9, 10]


@pytest.mark.parametrize(
    ("start", "end", "error"),
    [
        ("2027-03-01 05:00", "2027-03-01 01:00", "The end must be after the start."),
        ("yesterday", "2027-03-01 01:00", "Enter a valid date/time."),
    ],
)
def test_backfill_with_a_bad_range_shows_the_form_again_and_claims_nothing(operator, start, end, error):
    response = _act(operator, "backfill", [_schedule().pk], apply="1", start=start, end=end)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not JobRun.objects.exists()


def test_backfill_into_the_future_is_refused_with_the_services_message(operator):
    response = _act(operator, "backfill", [_schedule().pk], apply="1", start="2027-03-01 10:00", end="2027-03-02 10:00")
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("start < end <= now" in m for m in messages)
    assert not JobRun.objects.exists()


def test_rerun_gives_a_dead_run_another_attempt_and_records_who_asked(operator):
    dead = _run(T0, RunStatus.DEAD, attempts=3, error="boom")
    fine = _run(T0 - timedelta(hours=1))
    _act(operator, "rerun_runs", [dead.pk, fine.pk], url="admin:scheduling_jobrun_changelist")
    dead.refresh_from_db()
    fine.refresh_from_db()
    assert (dead.status, fine.status) == (RunStatus.ENQUEUED, RunStatus.SUCCEEDED)
    assert JobRunEvent.objects.get(run=dead).message == "re-run requested by operator"
    assert _log_messages(dead) == ["Re-run requested (attempt 4, a new fence)"]
    assert _log_messages(fine) == []


# --- Read-only pages ----------------------------------------------------------------------


def test_job_runs_filter_by_job_status_trigger_and_day_and_show_lateness(viewer):
    _run(T0, RunStatus.DEAD, started_at=T0 + timedelta(minutes=4), error="ValueError: x")
    _run(T0 - timedelta(days=1))
    url = reverse("admin:scheduling_jobrun_changelist")
    query = "?job_name=hourly-report&status__exact=dead&trigger__exact=cron&scheduled_for__day=1&scheduled_for__month=3"
    response = viewer.get(url + query + "&scheduled_for__year=2027")
    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    assert "4 min 0 s" in response.content.decode()  # late by


@pytest.mark.parametrize("trigger", [Trigger.MANUAL, Trigger.BACKFILL])
def test_a_run_asked_for_by_hand_shows_no_lateness_since_no_tick_set_its_time(viewer, trigger):
    # A backfill of last week starts days after its logical time: that is not lateness.
    _run(T0 - timedelta(days=8), trigger=trigger, started_at=NOW)
    _run(T0, started_at=T0 + timedelta(minutes=4))  # a cron tick: late by 4 min
    page = viewer.get(reverse("admin:scheduling_jobrun_changelist")).content.decode()
    late_by = re.findall(r'<td class="field-late_by">(.*?)</td>', page)
    assert late_by == ["4 min 0 s", "- (by hand)"]
    assert [r.late_by for r in JobRun.objects.order_by("scheduled_for")] == [None, timedelta(minutes=4)]


def test_a_run_page_is_read_only_and_shows_its_events_fence_and_error(viewer):
    run = _run(T0, RunStatus.DEAD, error="Traceback ...\nValueError: bad row 17")
    JobRunEvent.objects.create(run=run, at=T0, kind="started", attempt=1, fence=7, worker="web-1:42")
    response = viewer.get(reverse("admin:scheduling_jobrun_change", args=[run.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "ValueError: bad row 17" in page and "web-1:42" in page
    assert 'name="_save"' not in page


def test_a_run_page_lists_its_events_in_the_order_they_were_written_not_by_their_clocks(viewer):
    # A fast scheduler abandoned the run; a slow worker restarted it and it succeeded: by the
    # writers' clocks the abandonment comes last, by the order of writing it comes second.
    run = _run(T0, RunStatus.SUCCEEDED)
    for kind, seconds in [("started", 0), ("abandoned", 200), ("started", 120), ("succeeded", 130)]:
        JobRunEvent.objects.create(run=run, at=T0 + timedelta(seconds=seconds), kind=kind)
    assert list(run.events.values_list("kind", flat=True)) == ["started", "abandoned", "started", "succeeded"]
    page = viewer.get(reverse("admin:scheduling_jobrun_change", args=[run.pk])).content.decode()
    rows = re.findall(r'<td class="original">\s*<p>\s*(\w+) at ', page)  # each inline row's title
    assert rows == ["started", "abandoned", "started", "succeeded"]


def test_nobody_adds_changes_or_deletes_engine_rows_here(admin_client):
    run = _run(T0)
    delete_run = reverse("admin:scheduling_jobrun_delete", args=[run.pk])
    change_schedule = reverse("admin:scheduling_schedule_change", args=[_schedule().pk])
    assert admin_client.get(reverse("admin:scheduling_jobrun_add")).status_code == 403
    assert admin_client.post(delete_run, {"post": "yes"}).status_code == 403
    assert admin_client.post(change_schedule, {}).status_code == 403
    assert JobRun.objects.filter(pk=run.pk).exists()


def test_the_schedule_list_shows_next_fire_times_in_utc_and_local_and_the_last_run(viewer):
    _run(T0, RunStatus.SUCCEEDED)
    page = viewer.get(reverse("admin:scheduling_schedule_changelist")).content.decode()
    assert "2027-03-01 13:00" in page  # UTC
    assert "2027-03-01 14:00 CET" in page  # Europe/Paris
    assert "2027-03-01 12:00 UTC succeeded" in page


def test_the_admin_index_links_the_dashboard_and_the_explainer(viewer):
    page = viewer.get(reverse("admin:index")).content.decode()
    assert reverse("admin:scheduling_dashboard") in page
    assert reverse("cron_explainer") in page  # public: it reads no data


def test_a_pause_from_the_dashboard_returns_to_the_job_with_its_confirmation_there(operator):
    url = reverse("admin:scheduling_dashboard")
    done = _act(operator, "pause_schedules", [_schedule().pk], url="admin:scheduling_dashboard")
    assert (done.status_code, done["Location"]) == (302, f"{url}?job=hourly-report#job-hourly-report")
    page = operator.get(done["Location"]).content.decode()
    section = re.search(r'<section class="module job" id="job-hourly-report">.*?</section>', page, re.S)
    assert section is not None and "hourly-report paused." in section.group(0)
    assert page.count("hourly-report paused.") == 1  # in the job's section, not at the top too


def test_the_dashboard_lists_each_jobs_last_runs_newest_first(viewer):
    for hours, status in ((3, RunStatus.SUCCEEDED), (2, RunStatus.DEAD), (1, RunStatus.SKIPPED)):
        _run(T0 - timedelta(hours=hours), status)
    page = viewer.get(reverse("admin:scheduling_dashboard")).content.decode()
    recent = re.search(r'<section class="module job" id="job-hourly-report">.*?class="recent">(.*?)</td>', page, re.S)
    assert recent is not None
    assert re.findall(r'(\w{3} \d\d \w{3} \d\d:\d\d) UTC <span class="status (\w+)"', recent.group(1)) == [
        ("Mon 01 Mar 11:00", "skipped"),
        ("Mon 01 Mar 10:00", "dead"),
        ("Mon 01 Mar 09:00", "succeeded"),
    ]


@pytest.mark.parametrize(
    ("cron", "registered_ago", "span"),
    [
        ("*/5 * * * *", timedelta(days=30), timedelta(hours=4)),  # 48 ticks of five minutes
        ("* * * * *", timedelta(days=30), timedelta(hours=1)),  # at least an hour
        ("0 * * * *", timedelta(days=30), timedelta(hours=47, minutes=30)),  # 12:30 to the 48th at 12:00
        ("0 2 * * *", timedelta(days=90), timedelta(days=35)),  # at most 35 days
        ("30 20 * * 0", timedelta(days=2, minutes=10), timedelta(days=2, minutes=10)),  # since it was registered
        ("30 20 * * 0", timedelta(minutes=10), timedelta(hours=1)),
    ],
)
def test_a_timeline_spans_about_48_of_its_jobs_ticks_since_it_was_registered(cron, registered_ago, span):
    job = make_job("fitted", cron=cron)
    schedule = Schedule(job_name=job.name, first_seen_at=NOW - registered_ago)
    assert timeline_fitted_start(job=job, schedule=schedule, now=NOW) == NOW - span


def test_the_dashboard_needs_staff(client):
    response = client.get(reverse("admin:scheduling_dashboard"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


# --- The dashboard timeline -------------------------------------------------------------


def test_the_timeline_matches_ticks_to_runs_and_tells_missed_late_and_pending():
    _run(T0 - timedelta(hours=2))
    _run(T0 - timedelta(hours=1), started_at=T0 - timedelta(minutes=50))  # 10 min late
    _run(T0 - timedelta(minutes=5), RunStatus.SUCCEEDED, trigger=Trigger.MANUAL)  # not a tick
    timeline = job_timeline(job=HOURLY, schedule=_schedule(), start=T0 - timedelta(hours=3, minutes=30), now=NOW)
    hourly = [(t.scheduled_for, t.outcome, t.late) for t in timeline.ticks]
    assert hourly == [
        (T0 - timedelta(hours=3), MISSED, False),
        (T0 - timedelta(hours=2), RunStatus.SUCCEEDED, False),
        (T0 - timedelta(hours=1), RunStatus.SUCCEEDED, True),
        (T0, MISSED, False),
    ]
    assert [r.trigger for r in timeline.other_runs] == [Trigger.MANUAL]
    young = job_timeline(job=HOURLY, schedule=_schedule(), start=T0 - timedelta(hours=1), now=T0 + timedelta(minutes=2))
    assert young.ticks[-1].outcome == PENDING


def test_the_dashboard_draws_each_tick_with_its_outcome_late_runs_offset_and_missed_slots(viewer):
    for hours in range(1, 30):
        _run(T0 - timedelta(hours=hours))
    JobRun.objects.filter(scheduled_for=T0 - timedelta(hours=5)).delete()
    JobRun.objects.filter(scheduled_for=T0 - timedelta(hours=7)).update(status=RunStatus.DEAD)
    JobRun.objects.filter(scheduled_for=T0 - timedelta(hours=9)).update(
        status=RunStatus.SKIPPED, skip_reason=SkipReason.OVERLAP
    )
    late_tick = T0 - timedelta(hours=3)
    JobRun.objects.filter(scheduled_for=late_tick).update(started_at=late_tick + timedelta(minutes=25))
    page = viewer.get(reverse("admin:scheduling_dashboard") + "?days=1").content.decode()
    found = re.search(r'<svg class="timeline" data-job="hourly-report".*?</svg>', page, re.S)
    assert found is not None
    svg = found.group(0)
    assert svg.count('class="tick ') == 24  # 12:30 back to yesterday 12:30: 24 hourly ticks
    assert svg.count('class="slot missed"') == 2  # 07:00 deleted, and 12:00 never claimed
    assert svg.count('class="run dead"') == 1 and svg.count('class="run skipped"') == 1
    assert svg.count('class="run succeeded late"') == 1 and svg.count('class="link late"') == 1
    assert "2027-03-01 09:00 UTC (10:00 CET): succeeded, started 25 min late" in svg
    assert "2027-03-01 07:00 UTC (08:00 CET): missed, never claimed" in svg
    late_x = [float(x) for x in re.findall(r'class="link late" x1="([\d.]+)".*?x2="([\d.]+)"', svg)[0]]
    assert late_x[1] > late_x[0]  # the run is drawn right of its tick


def test_a_schedule_no_code_declares_any_more_is_shown_retired_without_a_next_fire_time(viewer):
    retired = make_job("sim-probe", cron="* * * * *")
    with registry.replaced(HOURLY, DELAYED, retired):
        schedules_register(now=NOW)
    page = viewer.get(reverse("admin:scheduling_schedule_changelist")).content.decode()
    row = next(line for line in page.split("<tr") if "sim-probe" in line)
    assert "retired: no code declares it" in row
    assert "2027-03-01 12:31" not in row  # the next minute, which no scheduler will claim
    hourly = next(line for line in page.split("<tr") if "hourly-report" in line)
    assert "2027-03-01 13:00" in hourly
