"""The strategy probe as Tiffin runs it (``simulate --strategy claim``, through
SCHEDULER_EXTRA_JOB_MODULES; production never imports this module).

The same work and the same charge row, with no unique key, as the other strategies
(``simulation.strategies``); what is different is around it: each tick is one claim row,
a long run heartbeats, a run whose heartbeat stops for ``LEASE_SECONDS`` is abandoned and
retried under a new fence, and the charge passes ``fence_check`` in its own transaction,
keyed by the run (a retry finds an earlier attempt's committed charge).
A worker that lost its run learns it at its next heartbeat or at the write; either
refusal is recorded on its execution row.
"""

from __future__ import annotations

from django.db import transaction

from scheduling.context import RunContext, RunLostError
from scheduling.execution import worker_name
from scheduling.fencing import StaleFenceError
from scheduling.models import Fence, JobRun
from scheduling.registry import job
from simulation.models import StrategyRun
from simulation.strategies import LEASE_SECONDS, PROBE_CRON, PROBE_JOB, Strategy, execution_charge, execution_start
from simulation.strategies import probe_work as work
from tiffin import clock


# More attempts than a real job needs: on a loaded machine an accelerated 90 s lease is
# under a real second, and a heartbeat that late costs an attempt (never a second charge).
@job(PROBE_JOB, cron=PROBE_CRON, heartbeat=True, timeout_seconds=LEASE_SECONDS, max_attempts=6, backoff_seconds=10)
def strategy_probe(ctx: RunContext) -> dict[str, int]:
    execution_id = execution_start(strategy=Strategy.CLAIM, tick=ctx.scheduled_for, server=worker_name())
    # The charge is keyed by the run, as README's step 4 keys a write that must not happen
    # twice: the fence alone refuses a stale attempt, not a retry of an attempt that died
    # after its charge committed and before its success was recorded (a server killed in
    # that instant). The run's fence row, written in the charge's own transaction, says
    # that an earlier attempt charged; every attempt of the run first locks the run's row,
    # so two attempts at the charge at once take turns and the second reads what the
    # first committed (no check-then-act race). Keyed by the run, not the tick: two runs
    # of one tick would still show as two charges.
    resource = f"{PROBE_JOB}:run:{ctx.run_id}"
    try:
        work(tick=ctx.scheduled_for, heartbeat=ctx.heartbeat)
        with transaction.atomic():
            list(JobRun.objects.select_for_update().filter(id=ctx.run_id).values_list("id", flat=True))
            charged_before = Fence.objects.filter(resource=resource).exists()
            ctx.fence_check(resource)
            if charged_before:
                StrategyRun.objects.filter(id=execution_id).update(finished_at=clock.now())
                return {"charges": 0}
            execution_charge(execution_id=execution_id, stale=False)
    except (RunLostError, StaleFenceError):
        StrategyRun.objects.filter(id=execution_id).update(refused=True, finished_at=clock.now())
        raise
    return {"charges": 1}
