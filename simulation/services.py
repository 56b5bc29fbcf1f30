"""Writes of the simulation: the probe jobs' charges, forgetting a previous run, and
handing a simulated database over to the real clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django_q.models import OrmQ

from operations.alerts import alerts_resolve
from operations.monitoring import runs_check
from payouts.models import Payout
from scheduling.context import RunContext
from scheduling.events import events_write
from scheduling.execution import worker_name
from scheduling.fencing import fence_check
from scheduling.models import (
    IN_FLIGHT_STATUSES,
    Fence,
    JobKind,
    JobRun,
    JobRunEvent,
    RunAlert,
    RunStatus,
    Schedule,
    SchedulerNode,
    SkipReason,
)
from simulation.models import ProbeCharge, StrategyRun

# The jobs simulation.probe_jobs adds while `simulate` runs; no other code declares them.
PROBE_JOB = "sim-probe"
SETTLEMENT_JOB = "sim-settlement"
PROBE_JOBS = (PROBE_JOB, SETTLEMENT_JOB)


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
        "probe charges": ProbeCharge.objects.count(),
        "queued tasks": OrmQ.objects.count(),
    }


class SimulationResetError(Exception):
    """A ``simulate --reset`` refused; the message names what it would have destroyed."""


def simulation_reset(*, development: bool) -> None:
    """Forget the engine's state so a simulation starts from nothing: runs and their
    events, alerts, fences, schedules, scheduler nodes, queued tasks, probe charges and
    strategy executions. Restaurants, orders, carts and the ledger stay.

    Refuses (SimulationResetError, nothing deleted):
    1. a database that holds payouts, always: each payout keeps the run that wrote it, and
       forgetting the payouts while the orders stay would make paid orders look unpaid (the
       next run pays them again). ``seed_demo --reset --delete-payouts`` deletes the ledger
       with its orders, on a development database;
    2. outside development settings (``development``: the caller's ``settings.DEBUG``),
       anything to forget: job runs are the claims that make a repeated tick harmless.
    """
    with transaction.atomic():
        counts = simulation_state_counts()
        if counts["payouts"]:
            raise SimulationResetError(
                f"this database holds {counts['payouts']} payouts: --reset never deletes the ledger, which would "
                "leave the orders they paid looking unpaid. On a development database, start over with "
                "seed_demo --reset --delete-payouts (it deletes the payouts with the orders they cover); "
                "nothing was deleted"
            )
        left = {what: n for what, n in counts.items() if n}
        if left and not development:
            found = ", ".join(f"{n} {what}" for what, n in left.items())
            raise SimulationResetError(
                f"refusing --reset outside development settings (DEBUG is off): it would delete {found}; "
                "nothing was deleted"
            )
        ProbeCharge.objects.all().delete()
        StrategyRun.objects.all().delete()
        JobRunEvent.objects.all().delete()
        JobRun.objects.all().delete()
        for model in (RunAlert, Fence, Schedule, SchedulerNode, OrmQ):
            model.objects.all().delete()


@dataclass(frozen=True)
class HandOver:
    """What ``simulation_hand_over`` found and did."""

    simulated_until: datetime | None  # the simulated clock's last scheduler pass
    now: datetime
    probe_runs: int
    retired_runs: int = 0  # runs the simulation left in flight, now skipped

    def line(self) -> str:
        until = f"{self.simulated_until:%a %d %b %H:%M} UTC" if self.simulated_until else "an unknown time"
        retired = (
            f" {self.retired_runs} run{'s' if self.retired_runs != 1 else ''} the simulation left unfinished "
            f"{'are' if self.retired_runs != 1 else 'is'} skipped (simulation ended), not run late."
            if self.retired_runs
            else ""
        )
        return (
            f"The simulated history ends at {until}; the schedules start afresh from now "
            f"({self.now:%a %d %b %H:%M} UTC), so the time between is not taken for an outage.{retired}"
        )


def simulation_hand_over(*, now: datetime) -> HandOver | None:
    """Hand a database a simulation ran on over to servers on the real clock (``make up``
    after ``make demo``); None when no simulation left anything here (or it was handed
    over already, or ``--reset`` wiped it).

    1. The simulated servers are gone for good: their scheduler nodes are forgotten.
    2. The probe jobs' schedules and runs go (no code declares them outside ``simulate``,
       and nothing would ever finish their runs; a task still queued for one finds no
       run and does nothing); their charges stay.
    3. Every cron schedule is registered afresh as of ``now``: the scheduler claims no
       tick between the simulated past and now (it is not an outage of this deployment:
       no server of it was meant to run), and the missed-run check expects none.
    4. Every run the simulation left in flight (a delayed run not yet due when its
       clock stopped, a retry, a claim its stopped workers never finished) is retired:
       skipped with the reason "simulation ended", an event saying so. Run at the real
       present it would act days late on the simulated past (cancel a demo order whose
       restaurant had minutes left to answer); its servers are gone, so it never ran.
    5. The alerts the simulation left open are resolved unless the check, as of ``now``,
       still finds their problem (``/healthz`` counts the open ones).
    """
    if not Schedule.objects.filter(job_name__in=PROBE_JOBS).exists():
        return None
    with transaction.atomic():
        simulated_until = SchedulerNode.objects.order_by("-last_pass_at").values_list("last_pass_at", flat=True).first()
        SchedulerNode.objects.all().delete()
        probe_runs = JobRun.objects.filter(job_name__in=PROBE_JOBS)
        JobRunEvent.objects.filter(run__in=probe_runs).delete()
        counted = probe_runs.count()
        probe_runs.delete()
        Schedule.objects.filter(job_name__in=PROBE_JOBS).delete()
        Schedule.objects.filter(kind=JobKind.CRON).update(first_seen_at=now)
        retired = _runs_retire(now=now)
        alerts_resolve(current={problem.key for problem in runs_check(now=now)}, now=now)
    return HandOver(simulated_until=simulated_until, now=now, probe_runs=counted, retired_runs=retired)


def _runs_retire(*, now: datetime) -> int:
    """Skip every run still in flight (reason: the simulation ended); return how many."""
    runs = list(JobRun.objects.select_for_update().filter(status__in=IN_FLIGHT_STATUSES).order_by("id"))
    for run in runs:
        run.status, run.skip_reason, run.finished_at = RunStatus.SKIPPED, SkipReason.SIMULATION_ENDED, now
    JobRun.objects.bulk_update(runs, ["status", "skip_reason", "finished_at"], batch_size=1000)
    events_write(runs, kind="skipped", now=now, message="the simulation ended before the run finished")
    return len(runs)
