"""System checks: a bad job declaration stops every process at start; a deployment that
would slow down or lose counts over time is warned of."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register

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


# The tables that churn: every run row is inserted (claimed) and then updated three times
# (enqueued, started, finished), and django-q2's queue inserts and deletes a row per task.
_CHURNING_TABLES = ("job_runs", "django_q_ormq")


@register(Tags.database)
def check_autovacuum(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """On PostgreSQL, autovacuum on for the server and for the tables that churn. Run by
    ``migrate`` and ``manage.py check --database default``."""
    from django.db import connections

    warnings = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":  # seam: autovacuum is PostgreSQL's
            continue
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('autovacuum')")
            [(server,)] = cursor.fetchall()
            cursor.execute(
                "SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r' "
                "AND 'autovacuum_enabled=false' = ANY(reloptions) ORDER BY relname",
                [list(_CHURNING_TABLES)],
            )
            tables = [name for (name,) in cursor.fetchall()]
        off = (["the server (autovacuum = off)"] if server != "on" else []) + [f"table {name}" for name in tables]
        if off:
            warnings.append(
                Warning(
                    f"database {alias!r}: autovacuum is off for {', '.join(off)}. Each job_runs row is updated "
                    "three times after its claim and django-q2's queue deletes a row per task: their dead rows "
                    "and index entries are reclaimed only by a VACUUM, so the tables and indexes grow without it",
                    hint="Turn autovacuum on (postgresql.conf, or ALTER TABLE ... RESET (autovacuum_enabled)); "
                    "docs/operations.md, 'PostgreSQL'.",
                    id="scheduling.W002",
                )
            )
    return warnings
