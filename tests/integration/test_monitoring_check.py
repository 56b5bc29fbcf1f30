"""The missed-run check: each kind of problem found in a prepared job_runs history,
and check_runs' exit code (0 when all is well, 1 when anything needs attention)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError
from django.db import connection

from operations.monitoring import runs_check
from scheduling import queries
from scheduling.models import JobRun, ProblemKind, RunStatus, SkipReason, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, make_job
from tiffin.db import adapt

# The check runs at NOW; the job was first seen two days earlier, ticks every hour.
NOW = T0  # 2027-03-01 12:00 UTC
HOURLY = make_job("hourly-report", cron="0 * * * *", timeout_seconds=600)
BROKEN_TICK = NOW.replace(hour=5)


def _ticks_in_window():
    """The hourly ticks the default 24 h window (minus the 5 min grace) judges."""
    return [NOW - timedelta(hours=h) for h in range(1, 24)]


def _run(scheduled_for, status=RunStatus.SUCCEEDED, *, job=HOURLY, **fields):
    started = fields.pop("started_at", scheduled_for + timedelta(seconds=2))
    defaults = {
        "due_at": scheduled_for,
        "trigger": Trigger.CRON,
        "created_at": scheduled_for,
        "enqueued_at": scheduled_for,
        "attempts": 1,
        "fence": 1,
        "started_at": started,
        "heartbeat_at": started,
        "finished_at": scheduled_for + timedelta(seconds=32) if status == RunStatus.SUCCEEDED else None,
    }
    defaults.update(fields)
    return JobRun.objects.create(job_name=job.name, scheduled_for=scheduled_for, status=status, **defaults)


@pytest.fixture
def clean_history(db):
    """Every hourly tick of the last two days ran, on time, and succeeded in 30 s; the
    clock stands at NOW (check_runs refuses a --now in the future, as tick does)."""
    with registry.replaced(HOURLY), time_machine.travel(NOW, tick=False):
        schedules_register(now=NOW - timedelta(days=2))
        for hours in range(1, 48):
            _run(NOW - timedelta(hours=hours))
        yield


def _replace_tick(when, status, **fields):
    JobRun.objects.filter(job_name=HOURLY.name, scheduled_for=when).delete()
    return _run(when, status, **fields)


def _check_runs(*args):
    out = StringIO()
    try:
        call_command("check_runs", "--now", NOW.isoformat(), *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def test_a_clean_history_has_no_problems_and_exits_0(clean_history):
    code, output = _check_runs()
    assert code == 0
    assert output.startswith("OK: no problems")
    assert runs_check(now=NOW) == []


def test_the_window_covers_the_ticks_a_day_back_except_the_grace(clean_history):
    JobRun.objects.all().delete()
    problems = runs_check(now=NOW)
    assert [p.scheduled_for for p in problems] == sorted(_ticks_in_window())
    assert {p.kind for p in problems} == {ProblemKind.NEVER_CLAIMED}


def _never_claimed():
    JobRun.objects.filter(scheduled_for=BROKEN_TICK).delete()


def _claimed_never_started():
    _replace_tick(BROKEN_TICK, RunStatus.ENQUEUED, started_at=None, heartbeat_at=None, attempts=0, fence=None)


def _stale_heartbeat():
    tick = NOW - timedelta(hours=1)
    _replace_tick(tick, RunStatus.RUNNING, started_at=tick, heartbeat_at=tick + timedelta(minutes=20))
    return tick


def _retrying():
    _replace_tick(BROKEN_TICK, RunStatus.FAILED, error="Traceback...\nConnectionError: upstream down")


def _dead():
    _replace_tick(BROKEN_TICK, RunStatus.DEAD, attempts=3, error="Traceback...\nValueError: bad row 17")


def _skipped():
    _replace_tick(BROKEN_TICK, RunStatus.SKIPPED, skip_reason=SkipReason.OVERLAP, started_at=None)


@pytest.mark.parametrize(
    ("prepare", "kind", "words"),
    [
        (_never_claimed, ProblemKind.NEVER_CLAIMED, "no scheduler claimed this tick"),
        (_claimed_never_started, ProblemKind.NOT_STARTED, "never started"),
        (_stale_heartbeat, ProblemKind.STALE_HEARTBEAT, "no heartbeat since 2027-03-01 11:20:00"),
        (_retrying, ProblemKind.RETRYING, "ConnectionError: upstream down"),
        (_dead, ProblemKind.DEAD, "dead after 3 attempts: ValueError: bad row 17"),
        (_skipped, ProblemKind.SKIPPED, "Another run was still running"),
    ],
)
def test_each_problem_is_found_with_its_job_and_logical_time_and_exits_1(clean_history, prepare, kind, words):
    tick = prepare() or BROKEN_TICK
    code, output = _check_runs("--json")
    report = json.loads(output)
    assert code == 1
    assert report["ok"] is False
    [problem] = report["problems"]
    assert (problem["kind"], problem["job"], problem["scheduled_for"]) == (kind, HOURLY.name, tick.isoformat())
    assert words in problem["detail"]


def test_a_heartbeating_run_past_three_times_its_median_duration_is_overrunning(db):
    job = make_job("long-import", cron="0 * * * *", heartbeat=True, timeout_seconds=600)
    with registry.replaced(job):
        schedules_register(now=NOW - timedelta(days=2))
        for hours in range(2, 30):  # each took 30 s; the expectation is max(3 x 30 s, the 5 min grace)
            _run(NOW - timedelta(hours=hours), job=job)
        tick = NOW - timedelta(hours=1)
        _run(tick, RunStatus.RUNNING, job=job, started_at=tick, heartbeat_at=NOW - timedelta(seconds=30))
        problems = runs_check(now=NOW)
        fresh = runs_check(now=tick + timedelta(minutes=4))
    assert [(p.kind, p.scheduled_for) for p in problems] == [(ProblemKind.OVERRUNNING, tick)]
    assert "running for 1h00m, expected at most 5m00s" in problems[0].detail
    assert fresh == []


def test_a_young_tick_within_the_grace_is_not_judged_yet(clean_history):
    JobRun.objects.filter(scheduled_for=NOW - timedelta(hours=1)).delete()
    assert runs_check(now=NOW - timedelta(hours=1) + timedelta(minutes=4)) == []
    assert len(runs_check(now=NOW - timedelta(hours=1) + timedelta(minutes=6))) == 1


def test_a_run_enqueued_within_the_grace_is_not_judged_yet(clean_history):
    tick = NOW - timedelta(hours=1)
    fields = {"started_at": None, "heartbeat_at": None, "attempts": 0, "fence": None}
    _replace_tick(tick, RunStatus.ENQUEUED, enqueued_at=NOW - timedelta(minutes=4), **fields)
    assert runs_check(now=NOW) == []
    later = runs_check(now=NOW + timedelta(minutes=2))
    assert [(p.kind, p.scheduled_for) for p in later] == [(ProblemKind.NOT_STARTED, tick)]


def test_ticks_before_the_job_was_first_seen_are_not_expected(db):
    with registry.replaced(HOURLY):
        schedules_register(now=NOW - timedelta(hours=3, minutes=30))
        problems = runs_check(now=NOW)
    assert [p.scheduled_for for p in problems] == [NOW - timedelta(hours=h) for h in (3, 2, 1)]


def test_a_delayed_run_left_scheduled_past_its_due_time_is_not_started(db):
    job = make_job("cancel-one", delayed=True)
    with registry.replaced(job):
        _run(NOW - timedelta(hours=2), RunStatus.SCHEDULED, job=job, subject="order:7", started_at=None)
        _run(NOW + timedelta(hours=2), RunStatus.SCHEDULED, job=job, subject="order:8", started_at=None)
        problems = runs_check(now=NOW)
    assert [(p.kind, p.subject) for p in problems] == [(ProblemKind.NOT_STARTED, "order:7")]


def test_a_run_that_died_in_the_window_is_reported_even_if_its_tick_is_older(clean_history):
    old_tick = NOW - timedelta(days=3)
    _run(old_tick, RunStatus.DEAD, attempts=3, error="boom", finished_at=NOW - timedelta(hours=2))
    assert [(p.kind, p.scheduled_for) for p in runs_check(now=NOW)] == [(ProblemKind.DEAD, old_tick)]


@pytest.mark.django_db(transaction=True)  # run_from_argv closes the connection when it is done
def test_check_runs_exit_status_is_what_a_probe_sees(clean_history):
    execute_from_command_line(["manage.py", "check_runs", "--now", NOW.isoformat()])  # returns: exit status 0
    _dead()
    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "check_runs", "--now", NOW.isoformat()])
    assert exited.value.code == 1


def test_check_runs_refuses_a_bad_instant(db):
    with pytest.raises(CommandError, match="--now: 'yesterday' is not an ISO 8601"):
        call_command("check_runs", "--now", "yesterday")


def test_check_runs_text_groups_problems_alike_and_its_json_keeps_every_one(clean_history):
    for hours in range(1, 7):  # six ticks skipped past their deadline, as after an outage
        _replace_tick(NOW - timedelta(hours=hours), RunStatus.SKIPPED, skip_reason=SkipReason.MISSED_DEADLINE)
    _dead()
    code, text = _check_runs()
    _, as_json = _check_runs("--json")
    assert code == 1
    assert text.splitlines() == [
        "7 problems in 2 groups (ticks from 2027-02-28 12:00 to 2027-03-01 11:55 UTC):",
        f"  Dead: hourly-report @ 2027-03-01 05:00 UTC (run {JobRun.objects.get(status=RunStatus.DEAD).id}): "
        "dead after 3 attempts: ValueError: bad row 17",
        "  Skipped: hourly-report, 6 ticks from 2027-03-01 06:00 to 2027-03-01 11:00 UTC: "
        "skipped: Later than the misfire deadline",
    ]
    assert len(json.loads(as_json)["problems"]) == 7


def test_never_started_runs_group_per_job_and_kind_with_their_count_and_range(db):
    """With no worker running, each delayed run carries its own due time: 10,559 problems
    printed as 10,016 groups. They are one line per job and kind, with the oldest and newest."""
    job = make_job("cancel-one", delayed=True)
    due = [NOW - timedelta(hours=5) + timedelta(seconds=57 * n) for n in range(300)]
    waiting = [
        JobRun(job_name=job.name, subject=f"order:{n}", scheduled_for=at, due_at=at, created_at=at,
               status=RunStatus.SCHEDULED, trigger=Trigger.DELAYED)
        for n, at in enumerate(due)
    ] + [
        JobRun(job_name=job.name, subject=f"order:{1000 + n}", scheduled_for=at, due_at=at, created_at=at,
               enqueued_at=at, status=RunStatus.ENQUEUED, trigger=Trigger.DELAYED)
        for n, at in enumerate(due[:40])
    ]  # fmt: skip
    JobRun.objects.bulk_create(waiting)
    with registry.replaced(job), time_machine.travel(NOW, tick=False):
        code, text = _check_runs()
        _, as_json = _check_runs("--json")
    assert code == 1
    assert text.splitlines() == [
        "340 problems in 2 groups (ticks from 2027-02-28 12:00 to 2027-03-01 11:55 UTC):",
        "  Claimed but never started: cancel-one, 300 runs from 2027-03-01 07:00 to 2027-03-01 11:44 UTC: "
        "due and never enqueued (is a scheduler running?)",
        "  Claimed but never started: cancel-one, 40 runs from 2027-03-01 07:00 to 2027-03-01 07:37 UTC: "
        "enqueued and never started (is a worker running?)",
    ]
    # Machines still get every run, each with its own due time.
    problems = json.loads(as_json)["problems"]
    assert len(problems) == 340 and len({p["detail"] for p in problems}) == 340


def test_on_sqlite_each_kind_of_run_in_flight_is_read_through_its_own_index(db):
    # SQLite's planner uses a partial index only when the statement says its condition as
    # written (PostgreSQL's plans: test_job_run_plans).
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plan")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + queries.RUNS_IN_FLIGHT, {"horizon": adapt(NOW)})
        scans = [row[-1] for row in cursor.fetchall() if row[-1].startswith(("SCAN", "SEARCH"))]
    indexes = [re.search(r"USING (?:COVERING )?INDEX (\w+)", scan) for scan in scans]
    assert [index[1] if index else scan for index, scan in zip(indexes, scans, strict=True)] == [
        "job_run_due",
        "job_run_status_rare",
        "job_run_enqueued_since",
        "job_run_running",
    ]
