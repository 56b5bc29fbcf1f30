"""Helpers for engine tests: declare test jobs, run what django-q2 would run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine
from django.utils.module_loading import import_string
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from scheduling.models import JobKind, JobRun, Misfire, Overlap, RunStatus
from scheduling.registry import Job

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


def make_job(
    name: str = "test-job",
    *,
    handler: Callable[..., Any] | None = None,
    cron: str = "*/10 * * * *",
    delayed: bool = False,
    **policies: Any,
) -> Job:
    return Job(
        name=name,
        handler=handler or (lambda ctx: {"ok": True}),
        kind=JobKind.DELAYED if delayed else JobKind.CRON,
        cron="" if delayed else cron,
        overlap=policies.pop("overlap", Overlap.ALLOW),
        misfire=policies.pop("misfire", Misfire.CATCH_UP),
        **policies,
    )


def queued_tasks() -> list[dict[str, Any]]:
    """The tasks waiting in django-q2's ORM broker, decoded."""
    return [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]


def drain_queue(limit: int = 1000) -> int:
    """Execute queued tasks in this process, as a worker would; returns how many ran."""
    ran = 0
    while ran < limit:
        row = OrmQ.objects.order_by("id").first()
        if row is None:
            return ran
        task = SignedPackage.loads(row.payload)
        row.delete()
        import_string(task["func"])(*task["args"], **task["kwargs"])
        ran += 1
    return ran


def pay(as_of: datetime, *, clock_at: datetime | None = None) -> JobRun:
    """Run weekly-payouts as of ``as_of`` the way run_job --sync does: claim, then execute
    (on a clock frozen at ``clock_at``, five minutes after ``as_of`` unless given)."""
    from scheduling.execution import runs_execute
    from scheduling.services import run_claim_manual

    with time_machine.travel(clock_at or as_of + timedelta(minutes=5), tick=False):
        run = run_claim_manual(job_name="weekly-payouts", scheduled_for=as_of, now=as_of, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return run
