"""Alerts go out once per problem (log, admin mail, webhook); heartbeat pings reach the
job's URL after a success and <url>/fail after a death. A real HTTP server on 127.0.0.1
receives them; channels that fail are logged and change nothing else."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.test import override_settings

from operations.alerts import alerts_open_count, problems_alert
from operations.jobs import check_missed_runs
from operations.monitoring import runs_check
from scheduling import services
from scheduling.execution import runs_execute
from scheduling.models import FenceCounter, JobRun, Misfire, ProblemKind, RunAlert, RunStatus, Trigger
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from support.ports import free_port
from tests.engine import T0, drain_queue, make_job

NOW = T0
HOURLY = make_job("hourly-report", cron="0 * * * *")
ADMINS = [("Ops", "ops@example.com")]


@dataclass
class Received:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]


@dataclass
class CaptureServer:
    url: str
    requests: list[Received] = field(default_factory=list)


@pytest.fixture
def http_server() -> Iterator[CaptureServer]:
    """An HTTP server on a random local port that records every request and answers 200."""
    received: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            received.append(Received("POST", self.path, self.rfile.read(length), dict(self.headers)))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, format: str, *args: object) -> None:  # keep the test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield CaptureServer(url=f"http://127.0.0.1:{server.server_address[1]}", requests=received)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def executable(transactional_db):
    """A transactional database where runs can start: transactional tests flush every
    table, and with it the SQLite fence counter row that a data migration created
    (PostgreSQL uses a sequence, which survives)."""
    FenceCounter.objects.get_or_create(id=1, defaults={"value": 0})


@pytest.fixture
def closed_port_url() -> str:
    """A URL nothing listens on (connection refused)."""
    return f"http://127.0.0.1:{free_port()}/hook"


def _dead_run(scheduled_for, job=HOURLY):
    return JobRun.objects.create(
        job_name=job.name,
        scheduled_for=scheduled_for,
        due_at=scheduled_for,
        status=RunStatus.DEAD,
        trigger=Trigger.CRON,
        created_at=scheduled_for,
        attempts=3,
        error="ValueError: bad row",
        finished_at=scheduled_for + timedelta(minutes=5),
    )


@pytest.fixture
def one_dead_run(db):
    """An hourly job whose runs of the last day all succeeded except one dead run."""
    with registry.replaced(HOURLY):
        schedules_register(now=NOW - timedelta(days=2))
        for hours in range(0, 30):
            when = NOW - timedelta(hours=hours)
            JobRun.objects.create(
                job_name=HOURLY.name,
                scheduled_for=when,
                due_at=when,
                status=RunStatus.SUCCEEDED,
                trigger=Trigger.CRON,
                created_at=when,
            )
        JobRun.objects.filter(scheduled_for=NOW.replace(hour=5)).delete()
        _dead_run(NOW.replace(hour=5))
        yield


def _check_and_alert(now=NOW):
    return problems_alert(problems=runs_check(now=now), now=now)


@pytest.mark.django_db(transaction=True)  # alerts are delivered once their rows commit
@override_settings(ADMINS=ADMINS)
def test_a_problem_is_alerted_once_across_hourly_checks(one_dead_run, http_server, mailoutbox, caplog):
    with override_settings(SCHEDULER_WEBHOOK_URL=f"{http_server.url}/hooks/abc"), caplog.at_level("ERROR"):
        first = _check_and_alert()
        second = _check_and_alert(NOW + timedelta(minutes=30))
        third = _check_and_alert(NOW + timedelta(hours=1, minutes=1))
    assert [p.kind for p in first] == [ProblemKind.DEAD]
    assert second == [] and third == []
    assert len(mailoutbox) == 1
    assert mailoutbox[0].to == ["ops@example.com"]
    assert "1 new scheduling problem: hourly-report" in mailoutbox[0].subject
    assert "dead after 3 attempts" in mailoutbox[0].body
    [hook] = http_server.requests
    payload = json.loads(hook.body)
    assert (hook.method, hook.path, hook.headers["Content-Type"]) == ("POST", "/hooks/abc", "application/json")
    assert [(p["kind"], p["job"], p["scheduled_for"]) for p in payload["problems"]] == [
        ("dead", "hourly-report", "2027-03-01T05:00:00+00:00")
    ]
    assert payload["text"].startswith("1 new scheduling problem")
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "operations.alerts"]
    assert [(line["event"], line["kind"]) for line in logged] == [("run_problem", "dead")]
    assert RunAlert.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@override_settings(ADMINS=ADMINS)
def test_a_later_problem_alerts_on_its_own_and_a_cleared_one_resolves(one_dead_run, http_server, mailoutbox):
    with override_settings(SCHEDULER_WEBHOOK_URL=http_server.url):
        _check_and_alert()
        assert alerts_open_count() == 1
        JobRun.objects.filter(scheduled_for=NOW - timedelta(hours=1)).delete()  # now never claimed
        new = _check_and_alert(NOW + timedelta(minutes=10))
        JobRun.objects.filter(status=RunStatus.DEAD).update(status=RunStatus.SUCCEEDED)  # re-run, and it worked
        _check_and_alert(NOW + timedelta(minutes=20))
    assert [(p.kind, p.scheduled_for) for p in new] == [(ProblemKind.NEVER_CLAIMED, NOW - timedelta(hours=1))]
    assert len(mailoutbox) == 2
    assert [len(json.loads(r.body)["problems"]) for r in http_server.requests] == [1, 1]
    assert alerts_open_count() == 1  # the never-claimed tick; the dead run was resolved
    assert RunAlert.objects.get(kind=ProblemKind.DEAD).resolved_at == NOW + timedelta(minutes=20)


@pytest.mark.django_db(transaction=True)
@override_settings(ADMINS=ADMINS, EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_PORT=1)
def test_channels_that_fail_are_logged_and_the_alert_is_still_recorded(one_dead_run, closed_port_url, caplog):
    with override_settings(SCHEDULER_WEBHOOK_URL=closed_port_url), caplog.at_level("WARNING"):
        alerted = _check_and_alert()
    assert len(alerted) == 1
    assert RunAlert.objects.count() == 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not mail the admins about 1 problems" in m for m in messages)
    assert any(m.startswith("webhook http://127.0.0.1:") and "did not take 1 problems" in m for m in messages)
    assert not any("/hook" in m for m in messages)  # the URL's path may hold a token: not logged


@pytest.mark.django_db(transaction=True)
@override_settings(ADMINS=ADMINS)
def test_an_outage_alerts_in_one_mail_with_alike_problems_on_one_line(one_dead_run, http_server, mailoutbox):
    JobRun.objects.filter(
        scheduled_for__gte=NOW - timedelta(hours=20), scheduled_for__lte=NOW - timedelta(hours=8)
    ).delete()
    with override_settings(SCHEDULER_WEBHOOK_URL=http_server.url):
        alerted = _check_and_alert()
    assert len(alerted) == 13 + 1  # thirteen ticks never claimed, and the dead run
    [mail] = mailoutbox
    assert mail.body.splitlines() == [
        "Never claimed: hourly-report, 13 ticks from 2027-02-28 16:00 to 2027-03-01 04:00 UTC: "
        "no scheduler claimed this tick",
        "Dead: hourly-report @ 2027-03-01 05:00 UTC (run "
        f"{JobRun.objects.get(status=RunStatus.DEAD).id}): dead after 3 attempts: ValueError: bad row",
    ]
    [hook] = http_server.requests
    assert len(json.loads(hook.body)["problems"]) == 14  # the machine gets every problem


def test_the_check_job_is_declared_hourly_and_coalesces():
    job = registry.get("check-missed-runs")
    assert (job.cron, job.timezone, job.misfire) == ("0 * * * *", "UTC", Misfire.COALESCE)
    assert job.handler is check_missed_runs


@override_settings(ADMINS=ADMINS)
def test_the_check_job_runs_through_the_engine_and_alerts(executable, http_server, mailoutbox):
    job = registry.get("check-missed-runs")
    with registry.replaced(HOURLY, job), override_settings(SCHEDULER_WEBHOOK_URL=http_server.url):
        schedules_register(now=NOW - timedelta(hours=2, minutes=30))
        with time_machine.travel(NOW, tick=False):
            services.run_claim_manual(job_name=job.name, scheduled_for=NOW, now=NOW)
            drain_queue()
    run = JobRun.objects.get(job_name=job.name)
    assert run.status == RunStatus.SUCCEEDED
    # No scheduler ran: both hourly ticks since registration were never claimed, of each
    # job (the check's own included).
    assert run.result == {"problems": 4, "alerted": 4}
    assert len(http_server.requests) == 1 and len(mailoutbox) == 1


# --- heartbeat pings ---------------------------------------------------------------------


def _execute_one(job, minutes=0):
    with registry.replaced(job), time_machine.travel(T0 + timedelta(minutes=minutes), tick=False):
        run = services.run_claim_manual(job_name=job.name, scheduled_for=T0, now=T0 + timedelta(minutes=minutes))
        assert run is not None
        runs_execute(run_ids=[run.id], worker="w1")
    run.refresh_from_db()
    return run


def test_a_success_pings_the_jobs_url(executable, http_server):  # transactional: pings go out on commit
    job = make_job("nightly-export", cron="0 2 * * *")
    with override_settings(SCHEDULER_PING_URLS={"NIGHTLY_EXPORT": f"{http_server.url}/ping/uuid-1"}):
        run = _execute_one(job)
    assert run.status == RunStatus.SUCCEEDED
    assert [(r.method, r.path) for r in http_server.requests] == [("POST", "/ping/uuid-1")]


def test_a_death_pings_fail_with_the_error_and_a_retry_does_not_ping(executable, http_server):
    def explode(ctx):
        raise RuntimeError("the bank API said no")

    job = make_job("nightly-export", cron="0 2 * * *", handler=explode, max_attempts=2)
    with override_settings(SCHEDULER_PING_URLS={"NIGHTLY_EXPORT": f"{http_server.url}/ping/uuid-1/"}):
        first = _execute_one(job)
        assert first.status == RunStatus.FAILED and http_server.requests == []
        JobRun.objects.filter(id=first.id).update(status=RunStatus.ENQUEUED)
        with registry.replaced(job), time_machine.travel(T0 + timedelta(minutes=5), tick=False):
            runs_execute(run_ids=[first.id], worker="w1")
    first.refresh_from_db()
    assert first.status == RunStatus.DEAD
    [ping] = http_server.requests
    assert ping.path == "/ping/uuid-1/fail"
    assert b"RuntimeError: the bank API said no" in ping.body


def test_a_ping_that_cannot_be_delivered_is_logged_and_the_run_still_succeeds(executable, closed_port_url, caplog):
    job = make_job("nightly-export", cron="0 2 * * *")
    with override_settings(SCHEDULER_PING_URLS={"NIGHTLY_EXPORT": closed_port_url}), caplog.at_level("WARNING"):
        run = _execute_one(job)
    assert run.status == RunStatus.SUCCEEDED
    assert any("ping for nightly-export (success) failed" in r.getMessage() for r in caplog.records)


def test_jobs_without_a_url_send_nothing(executable, http_server):
    job = make_job("nightly-export", cron="0 2 * * *")
    with override_settings(SCHEDULER_PING_URLS={"OTHER_JOB": http_server.url}):
        _execute_one(job)
    assert http_server.requests == []


# --- structured logs ---------------------------------------------------------------------


@pytest.mark.django_db
def test_each_run_transition_logs_one_json_line_with_job_logical_time_fence_attempt_duration_outcome(caplog):
    job = make_job("nightly-export", cron="0 2 * * *")
    with caplog.at_level("INFO", logger="scheduling.runs"):
        run = _execute_one(job, minutes=3)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "scheduling.runs"]
    assert [line["event"] for line in lines] == ["claimed", "started", "succeeded"]
    finished = lines[-1]
    assert finished == {
        "event": "succeeded",
        "job": "nightly-export",
        "subject": "",
        "scheduled_for": "2027-03-01T12:00:00+00:00",
        "run": run.id,
        "fence": run.fence,
        "attempt": 1,
        "duration_s": 0.0,
        "outcome": "succeeded",
    }


@pytest.mark.django_db(transaction=True)
@override_settings(ADMINS=ADMINS)
def test_problems_alike_are_one_log_line_and_one_mail_line_with_their_count_and_range(mailoutbox, caplog):
    with registry.replaced(HOURLY):
        schedules_register(now=NOW - timedelta(days=2))
        with caplog.at_level("ERROR"):
            problems_alert(problems=runs_check(now=NOW), now=NOW)  # 23 hourly ticks never claimed
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "operations.alerts"]
    assert logged == [
        {
            "event": "run_problems",
            "kind": "never_claimed",
            "job": "hourly-report",
            "count": 23,
            "first": "2027-02-28T13:00:00+00:00",
            "last": "2027-03-01T11:00:00+00:00",
            "detail": "no scheduler claimed this tick",
        }
    ]
    assert mailoutbox[0].body == (
        "Never claimed: hourly-report, 23 ticks from 2027-02-28 13:00 to 2027-03-01 11:00 UTC: "
        "no scheduler claimed this tick"
    )
    assert RunAlert.objects.count() == 23
