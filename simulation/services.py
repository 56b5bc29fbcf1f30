"""Writes of the simulation: the probe jobs' charges, and forgetting a previous run."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django_q.models import OrmQ

from payouts.models import Payout
from payouts.services import ledger_wipe
from scheduling.context import RunContext
from scheduling.execution import worker_name
from scheduling.fencing import fence_check
from scheduling.models import Fence, JobRun, JobRunEvent, RunAlert, Schedule, SchedulerNode
from simulation.models import ProbeCharge, StrategyRun


def probe_charge(*, ctx: RunContext, now: datetime, guarded: bool, fenced: bool = True) -> bool:
    """Charge once for ``ctx``'s tick; return whether a charge was written.

    The fence resource is the tick itself (not the job): with overlapping runs of one
    job, a later tick's higher token must not refuse an earlier tick's charge. A
    ``guarded`` charge also refuses a tick already charged, which is what a real
    payment does (the fence row lock makes the check and the insert atomic); an
    unguarded one counts every execution, which is what the fault-free scenarios measure.
    An unfenced one (only the simulation's deliberately broken build) skips the token check.
    """
    with transaction.atomic():
        if fenced:
            fence_check(f"probe:{ctx.job_name}:{ctx.scheduled_for.isoformat()}", ctx.fence, now=now, run_id=ctx.run_id)
        charged = ProbeCharge.objects.filter(job_name=ctx.job_name, scheduled_for=ctx.scheduled_for)
        if guarded and charged.exists():
            return False
        ProbeCharge.objects.create(
            job_name=ctx.job_name,
            scheduled_for=ctx.scheduled_for,
            run_id=ctx.run_id,
            fence=ctx.fence,
            attempt=ctx.attempt,
            worker=worker_name(),
            charged_at=now,
        )
    return True


def simulation_state_counts() -> dict[str, int]:
    """What a previous simulation (or a running deployment) left in the engine's tables."""
    return {
        "job runs": JobRun.objects.count(),
        "schedules": Schedule.objects.count(),
        "payouts": Payout.objects.count(),
        "strategy executions": StrategyRun.objects.count(),
    }


def simulation_reset() -> None:
    """Forget the engine's state so a simulation starts from nothing: runs and their
    events, alerts, fences, schedules, scheduler nodes, queued tasks, probe charges,
    strategy executions, and the payouts the runs wrote (a payout keeps its run, so they
    go together). Restaurants, orders and carts stay."""
    with transaction.atomic():
        ledger_wipe()
        ProbeCharge.objects.all().delete()
        StrategyRun.objects.all().delete()
        JobRunEvent.objects.all().delete()
        JobRun.objects.all().delete()
        for model in (RunAlert, Fence, Schedule, SchedulerNode, OrmQ):
            model.objects.all().delete()
