"""Two jobs for the metrics scenario: one that always succeeds, one that always dies
(one attempt, its handler raises). Both tick every minute of the accelerated clock."""

from __future__ import annotations

from scheduling.context import RunContext
from scheduling.registry import job


@job("metered-ok", cron="* * * * *", max_attempts=1)
def metered_ok(ctx: RunContext) -> dict[str, str]:
    return {"tick": ctx.scheduled_for.isoformat()}


@job("metered-dies", cron="* * * * *", max_attempts=1)
def metered_dies(ctx: RunContext) -> None:
    raise RuntimeError(f"metered-dies fails on purpose at {ctx.scheduled_for.isoformat()}")
