"""Hand runs to django-q2.

The ORM broker stores tasks in the default database, so an enqueue inside
``transaction.atomic()`` commits or rolls back with the claim that caused it. A pass that
hands out many tasks at once stores them with ``queue_bulk.enqueue_runs_bulk``.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_q.tasks import async_task

EXECUTE_TASK = "scheduling.tasks.execute_runs"


def enqueue_runs(*, job_name: str, run_ids: Sequence[int]) -> None:
    """Enqueue one worker task that will start and execute ``run_ids`` (one job)."""
    async_task(EXECUTE_TASK, list(run_ids), task_name=task_name(job_name, run_ids), group=job_name)


def task_name(job_name: str, run_ids: Sequence[int]) -> str:
    return f"{job_name}:{run_ids[0]}"
