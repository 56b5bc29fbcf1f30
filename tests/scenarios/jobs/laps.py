"""The run that laps itself: one slow job per overlap policy.

Each ticks every 2 minutes and runs for 5 (simulated), heartbeating every 15 seconds,
so a run is always still going at the next tick. A run that learns at a heartbeat that
it was superseded stops before charging (RunLostError); one that finishes charges once.
"""

from __future__ import annotations

from datetime import timedelta

from scheduling.context import RunContext
from scheduling.models import Overlap
from scheduling.registry import job
from simulation.services import probe_charge
from tiffin import clock

INTERVAL_MINUTES = 2
RUN_SECONDS = 5 * 60
HEARTBEAT_SECONDS = 15


def _slow_charge(ctx: RunContext) -> dict[str, bool]:
    finish_at = clock.now() + timedelta(seconds=RUN_SECONDS)
    while clock.now() < finish_at:
        ctx.heartbeat()  # raises RunLostError once the run is superseded
        clock.sleep(HEARTBEAT_SECONDS)
    return {"charged": probe_charge(ctx=ctx, now=clock.now(), guarded=False)}


for policy in Overlap:
    job(
        f"lap-{policy.value}",
        cron=f"*/{INTERVAL_MINUTES} * * * *",
        overlap=policy,
        heartbeat=True,
        timeout_seconds=20 * HEARTBEAT_SECONDS,
        max_attempts=1,
    )(_slow_charge)
