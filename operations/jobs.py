"""The engine's own jobs: the hourly dead-man's switch, and the hourly history prune."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

from operations.alerts import problems_alert
from operations.monitoring import runs_check
from operations.retention import HistoryPrune, history_prune
from scheduling.context import RunContext
from scheduling.models import Misfire, Overlap
from scheduling.registry import job
from tiffin import clock


# Half an hour before a check is taken for lost (the default is ten minutes): its work grows
# with the window's runs, an abandoned check repeats all of it, and the next tick is an hour
# away. (At the scenarios' 240x a slow machine took more than ten simulated minutes.)
@job(
    "check-missed-runs",
    cron="0 * * * *",
    misfire=Misfire.COALESCE,
    overlap=Overlap.FORBID,
    max_attempts=2,
    timeout_seconds=1800,
)
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


# At a quarter past, away from the check's and the other jobs' full hours. Coalesce: after
# an outage one prune as of the latest tick deletes everything the missed ones would have.
@job("prune-history", cron="15 * * * *", misfire=Misfire.COALESCE, overlap=Overlap.FORBID, heartbeat=True)
def prune_history(ctx: RunContext) -> dict[str, Any]:
    """Forget the history retention allows as of ``ctx.scheduled_for`` (operations.retention).

    As of the logical time, not the clock: a late or repeated run of a tick deletes
    nothing more than the on-time one did, so a second run of the same tick deletes nothing.
    """

    def on_batch(progress: HistoryPrune) -> None:
        ctx.batch_done(progress)  # heartbeats: raises RunLostError if this worker lost the run
        time.sleep(settings.SCHEDULER_PRUNE_PAUSE_SECONDS)  # leave the database to everyday writes

    pruned = history_prune(now=ctx.scheduled_for, batch_size=settings.SCHEDULER_PRUNE_BATCH_SIZE, on_batch=on_batch)
    return pruned.as_dict()
