"""Fast probe jobs for the three-charges, clock-skew and pooler scenarios.

Their charges are unguarded: every execution of a handler writes a row, so one charge
per tick proves one execution per tick, not merely one claim row. The timeout is far
longer than any run, so no run is ever abandoned in a fault-free scenario (an
abandoned run's handler may still finish, which is a second execution by design).
"""

from __future__ import annotations

from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.registry import job
from simulation.services import probe_charge
from tiffin import clock

PROBE_TIMEOUT_SECONDS = 6 * 3600


def _charge(ctx: RunContext) -> dict[str, bool]:
    return {"charged": probe_charge(ctx=ctx, now=clock.now(), guarded=False)}


job("probe-every-minute", cron="* * * * *", timeout_seconds=PROBE_TIMEOUT_SECONDS)(_charge)
job(
    "probe-every-2-minutes",
    cron="*/2 * * * *",
    overlap=Overlap.FORBID,
    misfire=Misfire.COALESCE,
    timeout_seconds=PROBE_TIMEOUT_SECONDS,
)(_charge)
job(
    "probe-every-5-minutes",
    cron="*/5 * * * *",
    overlap=Overlap.QUEUE,
    timeout_seconds=PROBE_TIMEOUT_SECONDS,
)(_charge)
