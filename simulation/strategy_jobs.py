"""The strategy probe as Tiffin runs it (``simulate --strategy claim``, through
SCHEDULER_EXTRA_JOB_MODULES; production never imports this module).

The same work and the same unguarded charge as the other strategies
(``simulation.strategies``); what is different is around it: each tick is one claim row,
a long run heartbeats, a run whose heartbeat stops for ``LEASE_SECONDS`` is abandoned and
retried under a new fence, and the charge passes ``fence_check`` in its own transaction.
A worker that lost its run learns it at its next heartbeat or at the write; either
refusal is recorded on its execution row.
"""

from __future__ import annotations

from django.db import transaction

from scheduling.context import RunContext, RunLostError
from scheduling.execution import worker_name
from scheduling.fencing import StaleFenceError
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
    try:
        work(tick=ctx.scheduled_for, heartbeat=ctx.heartbeat)
        with transaction.atomic():
            ctx.fence_check(f"{PROBE_JOB}:{ctx.scheduled_for.isoformat()}")
            execution_charge(execution_id=execution_id, stale=False)
    except (RunLostError, StaleFenceError):
        StrategyRun.objects.filter(id=execution_id).update(refused=True, finished_at=clock.now())
        raise
    return {"charges": 1}
