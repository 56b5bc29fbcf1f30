"""The engine's commands: tick, run_job, list_jobs; their JSON and their refusals."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.models import JobRun, RunStatus, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, make_job


def _call(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def every_ten_minutes():
    job = make_job("every-ten", cron="*/10 * * * *", handler=lambda ctx: {"tick": ctx.scheduled_for.isoformat()})
    with registry.replaced(job, make_job("later", delayed=True)):
        schedules_register(now=T0)
        yield job


@pytest.mark.django_db
def test_tick_claims_due_ticks_and_reports_them_as_json(every_ten_minutes):
    with time_machine.travel(T0 + timedelta(minutes=25), tick=False):
        report = json.loads(_call("tick", "--now", "2027-03-01T12:25:00Z", "--json"))
        again = _call("tick", "--now", "2027-03-01T12:25:00Z")
    assert [c["scheduled_for"] for c in report["claimed"]] == ["2027-03-01T12:10:00+00:00", "2027-03-01T12:20:00+00:00"]
    assert "no cron tick to claim" in again


@pytest.mark.django_db
def test_run_job_sync_runs_the_latest_tick_once(every_ten_minutes):
    with time_machine.travel(T0 + timedelta(minutes=25), tick=False):
        first = json.loads(_call("run_job", "every-ten", "--sync", "--json"))
        second = json.loads(_call("run_job", "every-ten", "--sync", "--json"))
    assert first["status"] == RunStatus.SUCCEEDED
    assert first["result"] == {"tick": "2027-03-01T12:20:00+00:00"}
    assert second["already_claimed"] is True
    run = JobRun.objects.get()
    assert (run.trigger, run.attempts) == (Trigger.MANUAL, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run_job", "no-such-job"], "unknown job 'no-such-job'"),
        (["run_job", "every-ten", "--scheduled-for", "last tuesday"], "not an ISO 8601 date-time"),
        (["run_job", "every-ten", "--scheduled-for", "2099-01-01T00:00:00Z"], "is in the future"),
        (["tick", "--now", "2027-13-01"], "not an ISO 8601 date-time"),
        # A typo in the year would claim ticks that have not happened and block the real ones.
        (["tick", "--now", "2037-03-01T12:30:00Z"], "is in the future"),
        (["run_job", "every-ten", "--scheduled-for", "2027-03-01T11:55:00Z"], "is not a tick of 'every-ten'"),
        (["run_job", "later", "--scheduled-for", "2027-03-01T11:50:00Z"], "is a delayed job"),
    ],
)
@pytest.mark.django_db
def test_bad_input_is_refused_with_a_clear_message_and_writes_nothing(every_ten_minutes, args, message):
    with time_machine.travel(T0, tick=False), pytest.raises(CommandError, match=message):
        call_command(*args, stdout=StringIO())
    assert JobRun.objects.count() == 0


@pytest.mark.django_db
def test_list_jobs_shows_schedule_policies_next_fire_times_and_last_run(every_ten_minutes):
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        _call("run_job", "every-ten", "--scheduled-for", "2027-03-01T12:00:00Z", "--sync")
        jobs = {job["name"]: job for job in json.loads(_call("list_jobs", "--json"))}
        job = jobs["every-ten"]
        text = _call("list_jobs")
    assert job["next_fire_times"] == [
        "2027-03-01T12:10:00+00:00",
        "2027-03-01T12:20:00+00:00",
        "2027-03-01T12:30:00+00:00",
    ]
    assert job["last_run"]["status"] == RunStatus.SUCCEEDED
    assert (job["overlap"], job["misfire"]) == ("allow", "catch_up")
    assert "*/10 * * * * (UTC)" in text
    assert jobs["later"]["next_fire_times"] == []


def _fail(ctx):
    raise ValueError("the bank said no")


@pytest.mark.django_db
def test_run_job_sync_exits_non_zero_when_the_run_fails():
    with registry.replaced(make_job("flaky", cron="*/10 * * * *", handler=_fail)):
        schedules_register(now=T0)
        with (
            time_machine.travel(T0 + timedelta(minutes=1), tick=False),
            pytest.raises(CommandError, match="did not succeed: failed"),
        ):
            call_command("run_job", "flaky", "--sync", stdout=StringIO())
    assert JobRun.objects.get().status == RunStatus.FAILED
