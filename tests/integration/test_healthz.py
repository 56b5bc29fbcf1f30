"""/healthz: 200 while the database answers and a scheduler passes; 503 when the
scheduler stops, was never started, or the database is unreachable."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.utils import load_backend
from django.test import Client, override_settings

from scheduling.loop import SchedulerLoop
from scheduling.models import ProblemKind, RunAlert
from scheduling.registry import registry
from tests.engine import T0, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.filterwarnings("ignore:No directory at:UserWarning")]

MAX_AGE = 63.0  # 3 x SCHEDULER_POLL_SECONDS (1 s) + 60 s


def _get(client=None, **headers):
    return (client or Client()).get("/healthz", **headers)


def _scheduler_pass(at):
    with registry.replaced(make_job()), time_machine.travel(at, tick=False):
        SchedulerLoop(name="scheduler@web-1:42").process_one_pass()


@override_settings(SCHEDULER_HEALTHZ_MAX_AGE_SECONDS=MAX_AGE)
def test_it_is_healthy_while_a_scheduler_passes_and_turns_503_when_it_stops():
    _scheduler_pass(T0)
    with time_machine.travel(T0 + timedelta(seconds=2), tick=False):
        alive = _get()
    with time_machine.travel(T0 + timedelta(seconds=MAX_AGE + 1), tick=False):
        stopped = _get()
    assert alive.status_code == 200
    assert alive.json() == {
        "status": "ok",
        "database": "ok",
        "scheduler_last_pass_age_seconds": 2.0,
        "scheduler_max_age_seconds": MAX_AGE,
        "open_problems": 0,
        "open_problem_groups": [],
    }
    assert stopped.status_code == 503
    assert stopped.json()["status"] == "unhealthy"
    assert stopped.json()["scheduler_last_pass_age_seconds"] == MAX_AGE + 1


def test_the_newest_pass_of_any_scheduler_counts():
    _scheduler_pass(T0)
    _scheduler_pass(T0 + timedelta(minutes=10))  # same name: the row is stamped again
    with registry.replaced(make_job()), time_machine.travel(T0 + timedelta(minutes=20), tick=False):
        SchedulerLoop(name="scheduler@web-2:7").process_one_pass()
    with time_machine.travel(T0 + timedelta(minutes=20, seconds=5), tick=False):
        response = _get()
    assert response.status_code == 200
    assert response.json()["scheduler_last_pass_age_seconds"] == 5.0


def test_it_is_503_when_no_scheduler_ever_ran():
    response = _get()
    assert response.status_code == 503
    assert response.json()["scheduler_last_pass_age_seconds"] is None


@contextmanager
def _database_unreachable(tmp_path: Path) -> Iterator[None]:
    """This thread's default connection, for the block, goes to a database that is not
    there: on PostgreSQL a port bound on 127.0.0.1 with nobody listening (the connection
    is refused), on SQLite a file in a directory that does not exist (it cannot be
    opened). The test's own connection, and its transaction, wait aside meanwhile."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: a connect gets RST
        dead = dict(connection.settings_dict)
        if connection.vendor == "postgresql":
            dead.update(HOST="127.0.0.1", PORT=str(closed.getsockname()[1]))
        else:
            dead.update(NAME=str(tmp_path / "missing" / "db.sqlite3"))
        unreachable = load_backend(dead["ENGINE"]).DatabaseWrapper(dead, DEFAULT_DB_ALIAS)
        ours = connections[DEFAULT_DB_ALIAS]
        connections[DEFAULT_DB_ALIAS] = unreachable
        try:
            yield
        finally:
            connections[DEFAULT_DB_ALIAS] = ours
            unreachable.close()


def test_it_is_503_when_the_database_is_unreachable(tmp_path):
    _scheduler_pass(T0)  # a scheduler passed: only the database is wrong
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False), _database_unreachable(tmp_path):
        response = _get()
    assert response.status_code == 503
    assert response.json()["database"] == "unreachable"
    assert response.json()["open_problems"] is None


def test_it_reports_open_problems_without_turning_unhealthy():
    _scheduler_pass(T0)
    for hour, resolved in ((3, None), (4, None), (5, T0)):
        RunAlert.objects.create(
            job_name="weekly-payouts",
            scheduled_for=T0.replace(hour=hour),
            kind=ProblemKind.DEAD,
            alerted_at=T0,
            resolved_at=resolved,
        )
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        response = _get()
    assert response.status_code == 200
    assert response.json()["open_problems"] == 2
    assert response.json()["open_problem_groups"] == [
        {
            "job": "weekly-payouts",
            "kind": "dead",
            "count": 2,
            "first": "2027-03-01T03:00:00Z",
            "last": "2027-03-01T04:00:00Z",
        }
    ]


@override_settings(ALLOWED_HOSTS=["tiffin.example.com"], SECURE_SSL_REDIRECT=True)
def test_probes_by_ip_over_plain_http_get_an_answer_and_everything_else_is_still_guarded():
    _scheduler_pass(T0)
    client = Client()
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        probe = _get(client, HTTP_HOST="10.244.1.17:8000")
        other_path = client.get("/admin/login/", HTTP_HOST="10.244.1.17:8000")
        plain_http = client.get("/admin/login/", HTTP_HOST="tiffin.example.com")
    assert probe.status_code == 200
    assert "Set-Cookie" not in probe.headers and "Location" not in probe.headers
    assert probe.headers["X-Content-Type-Options"] == "nosniff"
    assert other_path.status_code == 400  # DisallowedHost
    assert plain_http.status_code == 301
    assert plain_http["Location"] == "https://tiffin.example.com/admin/login/"


def test_it_only_answers_safe_methods():
    assert Client().post("/healthz").status_code == 405
