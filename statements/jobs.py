"""The job that mails the statement outbox.

Every minute. A tick that finds the previous run still mailing is skipped (the running one
takes every due statement); missed ticks collapse into one. Each statement carries its own
retry schedule (``next_attempt_at``), so the job itself is not retried: the next minute's
run is.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings

from operations.monitoring import CheckWindow, Problem, invariant
from outbox.jobs import outbox_sender_job
from scheduling.context import RunContext
from statements.models import SEND_STATEMENTS_JOB, Statement, StatementStatus
from statements.selectors import statements_stopped, statements_unsent_since
from statements.services import SendProgress, statement_problem, statements_send_due
from tiffin import clock

logger = logging.getLogger(__name__)

# Unsent statements reported per check (all of them stay counted in the statement admin).
UNSENT_PROBLEMS_KEPT = 1000


# Heartbeats come after each pass of STATEMENTS_BATCH_SIZE statements; a pass whose
# sends all time out lasts about batch x EMAIL_TIMEOUT x the SMTP steps, which the
# sender's timeout (outbox.jobs.SENDER_TIMEOUT_SECONDS) must exceed.
@outbox_sender_job(SEND_STATEMENTS_JOB)
def send_statements(ctx: RunContext) -> dict[str, int]:
    """Mail every due pending statement under this run's fence."""

    def on_batch(progress: SendProgress) -> None:
        ctx.batch_done(progress)  # heartbeats; raises RunLostError if the run is no longer ours
        logger.info("statements %s", progress)

    return statements_send_due(
        fence=ctx.fence,
        job_run_id=ctx.run_id,
        read_clock=clock.now,
        batch_size=settings.STATEMENTS_BATCH_SIZE,
        on_batch=on_batch,
    )


@invariant
def statements_sent(window: CheckWindow) -> list[Problem]:
    """Every statement is sent at least once: one still unsent STATEMENTS_UNSENT_GRACE_SECONDS
    after it was written is a problem (a mail server down for that long, a restaurant with
    no address), and so is every stopped one (the server refused it for good; alerted when
    it stopped), keyed by its Message-ID, so it is alerted once and resolved when it goes."""
    grace = timedelta(seconds=settings.STATEMENTS_UNSENT_GRACE_SECONDS)
    stopped = list(statements_stopped()[:UNSENT_PROBLEMS_KEPT])
    unsent = statements_unsent_since(written_before=window.now - grace).exclude(status=StatementStatus.STOPPED)
    return [
        *(statement_problem(statement=statement, detail=statement.last_error) for statement in stopped),
        *(
            statement_problem(statement=statement, detail=_unsent(statement))
            for statement in unsent[: UNSENT_PROBLEMS_KEPT - len(stopped)]
        ),
    ]


def _unsent(statement: Statement) -> str:
    if statement.status == StatementStatus.WAITING_RECIPIENT:
        return "the restaurant has no statement_email"
    return f"{statement.attempts} attempts, last: {statement.last_error or 'none yet'}"
