"""Helpers for engine tests: declare test jobs, run what django-q2 would run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.utils.module_loading import import_string
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from scheduling.models import JobKind, Misfire, Overlap
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
