"""The test-only cron job of the tick-lateness benchmark.

The worker processes it starts import this module through
``SCHEDULER_EXTRA_JOB_MODULES=bench.tick_jobs``; nothing else declares it.
"""

from __future__ import annotations

from bench.tick_lateness import TICK_CRON, TICK_JOB
from scheduling.context import RunContext
from scheduling.registry import job


@job(TICK_JOB, cron=TICK_CRON)
def bench_tick(ctx: RunContext) -> dict[str, str]:
    # Nothing to do: the benchmark measures when the run starts, not what it does.
    return {"scheduled_for": ctx.scheduled_for.isoformat()}
