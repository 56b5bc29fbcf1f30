"""The engine's own job: the hourly dead-man's switch."""

from __future__ import annotations

from scheduling.alerts import problems_alert
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.monitoring import runs_check
from scheduling.registry import job
from tiffin import clock


@job("check-missed-runs", cron="0 * * * *", misfire=Misfire.COALESCE, overlap=Overlap.FORBID, max_attempts=2)
def check_missed_runs(ctx: RunContext) -> dict[str, int]:
    """Check the runs of the last window and alert each new problem once.

    Unlike business jobs, this one reads the clock instead of using ``scheduled_for``:
    it reports the state of job_runs as it is now, and a check that ran late after an
    outage must judge today's rows by today's time.
    """
    now = clock.now()
    problems = runs_check(now=now)
    alerted = problems_alert(problems=problems, now=now)
    return {"problems": len(problems), "alerted": len(alerted)}
