"""Hand runs to django-q2.

The ORM broker stores tasks in the default database, so an enqueue inside
``transaction.atomic()`` commits or rolls back with the claim that caused it. A pass that
hands out many tasks at once stores them with ``queue_bulk.enqueue_runs_bulk``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django.utils import timezone
from django_q.brokers import get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import BadSignature, SignedPackage
from django_q.tasks import async_task

EXECUTE_TASK = "scheduling.tasks.execute_runs"


def enqueue_runs(*, job_name: str, run_ids: Sequence[int]) -> None:
    """Enqueue one worker task that will start and execute ``run_ids`` (one job)."""
    async_task(EXECUTE_TASK, list(run_ids), task_name=task_name(job_name, run_ids), group=job_name)


def task_name(job_name: str, run_ids: Sequence[int]) -> str:
    return f"{job_name}:{run_ids[0]}"


def queued_run_ids(among: Collection[int]) -> set[int] | None:
    """Those of ``among`` whose task waits in django-q2's queue table for a cluster to take
    it: the broker hands it out at its next fetch. A task a cluster has taken and not
    acknowledged is not counted: if that cluster died, or lost the database in a failover,
    the broker hands the task out again only after ``Q_CLUSTER['retry']`` (half an hour by
    default), so its run is requeued as any stale run. None with a broker whose queue
    cannot be read here (another broker, sync mode)."""
    broker = get_broker()
    if Conf.SYNC or type(broker) is not ORM:
        return None
    # The broker's own test (its queue_size): a task is taken by moving its lock ahead to
    # when it may be handed out again (now + retry); one still waiting has a lock not ahead.
    payloads = OrmQ.objects.using(Conf.ORM).filter(key=broker.list_key, lock__lte=timezone.now())
    wanted, found = set(among), set[int]()
    for payload in payloads.values_list("payload", flat=True):
        try:
            task = SignedPackage.loads(payload)
        except (TypeError, BadSignature):  # django-q2 itself fails such a package
            continue
        if task.get("func") == EXECUTE_TASK and task.get("args"):
            found.update(int(run_id) for run_id in task["args"][0] if int(run_id) in wanted)
    return found
