"""System checks: a bad job declaration stops every process at start."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Warning, register

from scheduling import cron
from scheduling.models import Misfire, Overlap
from scheduling.registry import Job, registry


def job_problems(job: Job) -> list[str]:
    """Everything wrong with one declaration, in words that name the field."""
    problems: list[str] = []
    if job.is_cron:
        try:
            cron.validate(job.cron)
        except cron.CronError as exc:
            problems.append(f"cron: {exc}")
    elif job.cron:
        problems.append("a delayed job takes no cron expression")
    try:
        cron.zone(job.timezone)
    except cron.CronError as exc:
        problems.append(f"timezone: {exc}")
    if job.overlap not in Overlap.values:
        problems.append(f"overlap: {job.overlap!r} is not one of {', '.join(Overlap.values)}")
    if job.misfire not in Misfire.values:
        problems.append(f"misfire: {job.misfire!r} is not one of {', '.join(Misfire.values)}")
    if job.misfire == Misfire.DEADLINE and not (job.misfire_deadline_seconds or 0) > 0:
        problems.append("misfire: 'deadline' needs misfire_deadline_seconds > 0")
    if job.max_attempts < 1:
        problems.append("max_attempts must be at least 1")
    if job.backoff_seconds < 0 or job.timeout_seconds < 1:
        problems.append("backoff_seconds must be >= 0 and timeout_seconds >= 1")
    if job.batch_size < 1 or (job.batch_size > 1 and job.is_cron):
        problems.append("batch_size must be 1 for cron jobs and at least 1 for delayed jobs")
    if isinstance(job.retention_days, int) and (isinstance(job.retention_days, bool) or job.retention_days < 1):
        problems.append("retention_days must be a whole number of days of at least 1, or None to keep every run")
    return problems


@register()
def check_job_declarations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return [
        Error(f"job {job.name!r}: {problem}", id="scheduling.E001")
        for job in registry.all()
        for problem in job_problems(job)
    ]


@register(deploy=True)
def check_metrics_directory(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """With metrics on behind forking servers, a directory is what makes the totals right."""
    from django.conf import settings

    if not settings.METRICS_ENABLED or settings.METRICS_MULTIPROC_DIR:
        return []
    return [
        Warning(
            "METRICS_ENABLED without METRICS_MULTIPROC_DIR: /metrics reports only the counts of the "
            "process that answers a scrape, not its server's total (gunicorn and django-q2 fork workers)",
            hint="Set METRICS_MULTIPROC_DIR to a directory every process of the server can write (docs/metrics.md).",
            id="scheduling.W001",
        )
    ]
