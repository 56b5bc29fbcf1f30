"""Hand runs to django-q2.

The ORM broker stores tasks in the default database, so an enqueue inside
``transaction.atomic()`` commits or rolls back with the claim that caused it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.utils import timezone
from django_q.brokers import get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signals import pre_enqueue
from django_q.signing import BadSignature, SignedPackage
from django_q.tasks import async_task

from scheduling.events import BULK_ROWS

EXECUTE_TASK = "scheduling.tasks.execute_runs"


def enqueue_runs(*, job_name: str, run_ids: Sequence[int]) -> None:
    """Enqueue one worker task that will start and execute ``run_ids`` (one job)."""
    enqueue_runs_many(tasks=[(job_name, run_ids)])


def enqueue_runs_many(*, tasks: Sequence[tuple[str, Sequence[int]]]) -> None:
    """Enqueue one worker task per ``(job_name, run_ids)``, as ``enqueue_runs`` does each.

    django-q2's ``async_task`` stores each task with an ORM ``create``: a statement per
    task, so a pass over 500 due cron jobs made 500 (bench/profile_scheduler.py). With
    the ORM broker the tasks are built as ``async_task`` builds them (the same package,
    signed the same way, the same ``pre_enqueue`` signal) and stored with one INSERT
    into the broker's table; in the caller's transaction, as before. Any other set-up
    (sync mode, another broker) takes ``async_task`` per task.
    """
    if not tasks:
        return
    broker = get_broker()
    if Conf.SYNC or type(broker) is not ORM:
        for job_name, run_ids in tasks:
            async_task(EXECUTE_TASK, list(run_ids), task_name=_task_name(job_name, run_ids), group=job_name)
        return
    lock = timezone.now()
    rows = [OrmQ(key=broker.list_key, payload=SignedPackage.dumps(_package(job, ids)), lock=lock) for job, ids in tasks]
    OrmQ.objects.using(Conf.ORM).bulk_create(rows, batch_size=BULK_ROWS)


def queued_run_ids() -> set[int] | None:
    """The runs a task in django-q2's queue table will still deliver: waiting to be taken,
    or taken by a cluster and not yet acknowledged (its lock runs out after
    ``Q_CLUSTER['retry']`` and the broker hands it out again). None with a broker whose
    queue cannot be read here (another broker, sync mode)."""
    broker = get_broker()
    if Conf.SYNC or type(broker) is not ORM:
        return None
    run_ids: set[int] = set()
    for payload in OrmQ.objects.using(Conf.ORM).filter(key=broker.list_key).values_list("payload", flat=True):
        try:
            task = SignedPackage.loads(payload)
        except (TypeError, BadSignature):  # django-q2 itself fails such a package
            continue
        if task.get("func") == EXECUTE_TASK and task.get("args"):
            run_ids.update(int(run_id) for run_id in task["args"][0])
    return run_ids


def _task_name(job_name: str, run_ids: Sequence[int]) -> str:
    return f"{job_name}:{run_ids[0]}"


def _package(job_name: str, run_ids: Sequence[int]) -> dict[str, Any]:
    """The task ``async_task(EXECUTE_TASK, run_ids, task_name=..., group=job_name)`` builds
    (django-q2 1.11), with its settings' overrides, announced by ``pre_enqueue``."""
    task: dict[str, Any] = {
        # async_task's id: a uuid4 as 32 hex digits (its human-readable twin is only a
        # default name, and every task here is named).
        "id": uuid.uuid4().hex,
        "name": _task_name(job_name, run_ids),
        "func": EXECUTE_TASK,
        "args": (list(run_ids),),
        "group": job_name,
    }
    if Conf.CACHED:
        task["cached"] = Conf.CACHED
    if Conf.ACK_FAILURES:
        task["ack_failure"] = Conf.ACK_FAILURES
    task["kwargs"] = {}
    task["started"] = timezone.now()
    pre_enqueue.send(sender="django_q", task=task)
    return task
