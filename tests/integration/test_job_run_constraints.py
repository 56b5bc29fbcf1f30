"""job_runs refuses a run in status ``enqueued`` without ``enqueued_at`` (the check
job_run_enqueued_has_enqueued_at), on PostgreSQL and SQLite alike, whichever way it is
written: the stale-run requeue reads ``enqueued_at``, and such a run would never get
another task."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction

from scheduling.models import JobRun, RunStatus, Trigger

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def _run(status: RunStatus, **fields: object) -> JobRun:
    values = {"job_name": "probe", "scheduled_for": NOW, "due_at": NOW, "created_at": NOW, "trigger": Trigger.CRON}
    return JobRun.objects.create(status=status, **values | fields)


def test_an_enqueued_run_without_enqueued_at_is_refused():
    with pytest.raises(IntegrityError, match="job_run_enqueued_has_enqueued_at"), transaction.atomic():
        _run(RunStatus.ENQUEUED)
    assert not JobRun.objects.exists()


def test_a_run_moved_to_enqueued_without_enqueued_at_is_refused():
    run = _run(RunStatus.SCHEDULED)
    with pytest.raises(IntegrityError, match="job_run_enqueued_has_enqueued_at"), transaction.atomic():
        JobRun.objects.filter(id=run.id).update(status=RunStatus.ENQUEUED)
    assert JobRun.objects.get(id=run.id).status == RunStatus.SCHEDULED


def test_a_raw_insert_of_an_enqueued_run_without_enqueued_at_is_refused():
    table = JobRun._meta.db_table
    insert = (
        f"INSERT INTO {table} (job_name, subject, scheduled_for, due_at, status, trigger, attempts, created_at, "
        "worker, skip_reason, error, overlap) VALUES ('probe', '', %s, %s, 'enqueued', 'cron', 0, %s, '', '', '', '')"
    )
    refused = pytest.raises(IntegrityError, match="job_run_enqueued_has_enqueued_at")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(insert, [NOW, NOW, NOW])
    assert not JobRun.objects.exists()


def test_an_enqueued_run_with_enqueued_at_and_a_run_in_any_other_status_without_it_are_accepted():
    _run(RunStatus.ENQUEUED, enqueued_at=NOW)
    for n, status in enumerate(s for s in RunStatus if s != RunStatus.ENQUEUED):
        _run(status, subject=f"s{n}")
    assert JobRun.objects.count() == len(RunStatus)
