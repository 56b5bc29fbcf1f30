"""The scheduler loop: one per server, any number of servers.

It sleeps to the next computed instant (the next cron tick of any job or the next due
run), capped by SCHEDULER_POLL_SECONDS so a delayed run created meanwhile is seen
soon; never a fixed interval, so "every hour" never drifts to :07 past.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from scheduling.dispatch import TickReport, next_wakeup, tick_pass
from scheduling.models import SchedulerNode
from tiffin import clock

logger = logging.getLogger("scheduling.loop")

# After a failed pass (database down, say), wait this long before the next one.
ERROR_BACKOFF_SECONDS = 2.0
# Wake this much after the computed instant, so the tick is due when the pass runs.
WAKE_MARGIN_SECONDS = 0.002


class SchedulerLoop:
    def __init__(self, *, name: str, stop: threading.Event | None = None) -> None:
        self.name = name
        self.stop = stop or threading.Event()
        self.started_at = clock.now()
        self.passes = 0

    def run_forever(self) -> None:
        logger.info("scheduler %s started", self.name)
        while not self.stop.is_set():
            # A long-lived process: drop connections past CONN_MAX_AGE or broken ones.
            close_old_connections()
            delay = self.process_one_pass_safely()
            self.stop.wait(delay)
        logger.info("scheduler %s stopped after %s passes", self.name, self.passes)

    def process_one_pass_safely(self) -> float:
        """Run a pass; return how many real seconds to sleep before the next."""
        try:
            return self.process_one_pass()
        except DatabaseError:
            # The database went away (restart, failover): drop the broken connection
            # and try again soon. Claims are idempotent, so a half-done pass is safe.
            logger.exception("scheduler pass failed; retrying in %ss", ERROR_BACKOFF_SECONDS)
            connection.close()
            return ERROR_BACKOFF_SECONDS
        except Exception:
            # Anything else (a job whose claim or enqueue keeps failing, a pre_enqueue
            # handler that raises): the pass did what it could (tick_pass runs its other
            # steps first) and says why; the loop, and with it the worker, keeps going.
            logger.exception("scheduler pass failed; retrying in %ss", ERROR_BACKOFF_SECONDS)
            return ERROR_BACKOFF_SECONDS

    def process_one_pass(self) -> float:
        now = clock.now()
        report = tick_pass(now=now)
        self.passes += 1
        self._stamp(now)
        _log_report(report)
        if report.more_due:
            return 0.0
        return self.seconds_until(next_wakeup(now=now, report=report))

    def seconds_until(self, wakeup: datetime) -> float:
        """Real seconds until ``wakeup`` (a clock instant), capped by the poll interval."""
        remaining = clock.real_seconds((wakeup - clock.now()).total_seconds()) + WAKE_MARGIN_SECONDS
        return min(max(remaining, 0.0), settings.SCHEDULER_POLL_SECONDS)

    def _stamp(self, now: datetime) -> None:
        SchedulerNode.objects.update_or_create(
            name=self.name,
            defaults={"last_pass_at": now, "passes": self.passes},
            create_defaults={"started_at": self.started_at, "last_pass_at": now, "passes": self.passes},
        )


def _log_report(report: TickReport) -> None:
    for claim in report.claimed:
        logger.info("claimed %s @ %s -> %s %s", claim.job_name, claim.scheduled_for, claim.status, claim.skip_reason)
    if report.abandoned or report.dead:
        logger.warning("abandoned %s runs, %s dead", report.abandoned, report.dead)
