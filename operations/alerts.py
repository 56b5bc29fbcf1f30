"""Alert each problem once: a log line, a mail to the admins, a POST to the webhook.

RunAlert is the memory: a problem is delivered only by the check that inserted its row,
so an hourly check (or several checkers at once) never repeats an alert. Delivery
happens after that row commits, and a channel that fails is logged, never fatal: the
check must keep checking even when the mail server or the webhook is down.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.mail import mail_admins
from django.db import DatabaseError, transaction
from django.db.models import Count, Max, Min
from django_q.tasks import async_task

from operations.monitoring import Problem, problems_grouped
from scheduling import outbound
from scheduling.models import RunAlert

logger = logging.getLogger("operations.alerts")

# Lines of a mail or webhook text; the webhook's JSON list always has every problem.
SUMMARY_LINES = 50


def problems_alert(*, problems: Sequence[Problem], now: datetime) -> list[Problem]:
    """Record ``problems``; deliver the ones never alerted before; resolve the rest.

    Returns the problems alerted by this call. Alerts no longer among ``problems`` are
    marked resolved (``/healthz`` counts the open ones).
    """
    with transaction.atomic():
        new = [problem for problem in problems if _record(problem, now=now)]
        alerts_resolve(current={problem.key for problem in problems}, now=now)
        if new:
            transaction.on_commit(lambda: problems_deliver(problems=new, now=now))
    return new


def problem_alert_now(*, problem: Problem, now: datetime) -> bool:
    """Record one problem found outside the check (a transfer the provider refused) and
    deliver it after the caller's transaction commits, if it was never alerted; resolve
    nothing else. The check, finding it again through an invariant, does not repeat it,
    and resolves it once the invariant no longer reports it. Returns whether it is new."""
    with transaction.atomic():
        new = _record(problem, now=now)
        if new:
            transaction.on_commit(lambda: problems_deliver(problems=[problem], now=now))
    return new


def _record(problem: Problem, *, now: datetime) -> bool:
    """Insert the problem's row; True if this call inserted it (and so must alert)."""
    alert, created = RunAlert.objects.get_or_create(
        job_name=problem.job_name,
        subject=problem.subject,
        scheduled_for=problem.scheduled_for,
        kind=problem.kind,
        defaults={"run_id": problem.run_id, "detail": problem.detail[:2000], "alerted_at": now},
    )
    if not created and alert.resolved_at is not None:
        # Seen again after it cleared (a run re-run and failing again): open, not re-sent.
        RunAlert.objects.filter(id=alert.id).update(resolved_at=None)
    return created


def alerts_resolve(*, current: set[tuple[str, str, datetime, str]], now: datetime) -> int:
    """Mark resolved the open alerts whose problem is not in ``current``; return how many."""
    # Served by the partial index job_run_alert_open (WHERE resolved_at IS NULL).
    open_alerts = RunAlert.objects.filter(resolved_at__isnull=True)
    gone = [a.id for a in open_alerts if (a.job_name, a.subject, a.scheduled_for, a.kind) not in current]
    return RunAlert.objects.filter(id__in=gone).update(resolved_at=now)


def alerts_open_count() -> int:
    # Served by the partial index job_run_alert_open.
    return RunAlert.objects.filter(resolved_at__isnull=True).count()


# At most this many groups in /healthz: its body stays small whatever is open.
OPEN_GROUPS_SHOWN = 20


def alerts_open_groups() -> list[dict[str, Any]]:
    """The open alerts by job and kind, with their count and range of logical times,
    most numerous first (the partial index job_run_alert_open holds only open ones)."""
    rows = (
        RunAlert.objects.filter(resolved_at__isnull=True)
        .values("job_name", "kind")
        .annotate(count=Count("id"), first=Min("scheduled_for"), last=Max("scheduled_for"))
        .order_by("-count", "job_name", "kind")[:OPEN_GROUPS_SHOWN]
    )
    return [
        {"job": r["job_name"], "kind": r["kind"], "count": r["count"], "first": r["first"], "last": r["last"]}
        for r in rows
    ]


def problems_deliver(*, problems: Sequence[Problem], now: datetime) -> None:
    """Send ``problems`` through every channel; each channel's failure is only logged."""
    # One line per group of problems alike (a single one as itself), not one per tick.
    for group in problems_grouped(problems):
        one = len(group.problems) == 1
        line = (
            {"event": "run_problem", **group.first.as_dict()} if one else {"event": "run_problems", **group.as_dict()}
        )
        logger.error(json.dumps(line, separators=(",", ":")))
    subject, body = _summary(problems)
    try:
        mail_admins(subject, body)
    except outbound.DELIVERY_ERRORS:  # a mail backend refusing raises the same kinds
        logger.exception("could not mail the admins about %s problems", len(problems))
    if settings.SCHEDULER_WEBHOOK_URL:
        webhook_post(url=settings.SCHEDULER_WEBHOOK_URL, problems=problems, now=now)


def webhook_post(*, url: str, problems: Sequence[Problem], now: datetime) -> bool:
    """POST the problems as JSON; ``text`` makes it readable by Slack-style webhooks."""
    subject, body = _summary(problems)
    payload = {
        "text": f"{subject}\n{body}",
        "source": "tiffin",
        "checked_at": now.isoformat(),
        "problems": [problem.as_dict() for problem in problems],
    }
    error = outbound.post(
        url,
        body=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "tiffin-alerts"},
        timeout=settings.SCHEDULER_WEBHOOK_TIMEOUT_SECONDS,
    )
    if error is not None:
        logger.warning("webhook %s did not take %s problems: %s", _safe(url), len(problems), error)
    return error is None


def _summary(problems: Sequence[Problem]) -> tuple[str, str]:
    """A subject and a body for people: problems alike share one line (``problems_grouped``)."""
    jobs = sorted({problem.job_name for problem in problems})
    noun = "problem" if len(problems) == 1 else "problems"
    subject = f"{len(problems)} new scheduling {noun}: {', '.join(jobs)}"
    lines = [str(group) for group in problems_grouped(problems)]
    if len(lines) > SUMMARY_LINES:
        more = len(lines) - SUMMARY_LINES
        lines = [*lines[:SUMMARY_LINES], f"... and {more} more lines: run manage.py check_runs for all of them"]
    return subject, "\n".join(lines)


def _safe(url: str) -> str:
    """The URL without its path and query, which often hold a secret token."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/..."


# --- Login lockouts (operations.lockouts hears them from django-axes) ----------------------

# The worker task that mails and posts a lockout: never the login request, which would
# wait on the mail server and the webhook (EMAIL_TIMEOUT, SCHEDULER_WEBHOOK_TIMEOUT_SECONDS)
# with a gunicorn worker held, for every client a guesser makes lock out.
LOCKOUT_DELIVER_TASK = "operations.alerts.lockout_deliver"


def lockout_alert(*, username: str, ip_address: str, failures: int, at: datetime, until: datetime) -> None:
    """Alert one admin login lockout: a warning log line (JSON, ``"event":"login_lockout"``)
    here, and a django-q2 task for a worker to mail the admins and POST to the webhook
    (``lockout_deliver``). Called once per lockout, inside the login request, when the
    failure that reaches the limit is counted; the task is stored in the same database, in
    the request's transaction when there is one."""
    line = _lockout_line(username=username, ip_address=ip_address, failures=failures, at=at, until=until)
    logger.warning(json.dumps(line, separators=(",", ":")))
    try:
        with transaction.atomic():  # a savepoint: a failed insert leaves the request's transaction usable
            async_task(LOCKOUT_DELIVER_TASK, line, task_name=f"login-lockout:{ip_address}", group="login-lockouts")
    except DatabaseError:
        # The lockout holds without it: the client still gets its 429 and django-axes still
        # logs the failure. The log line above is the alert that remains.
        logger.exception("login lockout of %s: its alert task could not be queued", ip_address)


def _lockout_line(*, username: str, ip_address: str, failures: int, at: datetime, until: datetime) -> dict[str, Any]:
    return {
        "event": "login_lockout",
        "username": username,
        "ip_address": ip_address,
        "failures": failures,
        "at": at.isoformat(),
        "locked_until": until.isoformat(),
    }


def lockout_deliver(line: dict[str, Any]) -> None:
    """Mail the admins and POST to the webhook about the lockout ``line`` describes (the
    worker's half of ``lockout_alert``). A channel that fails is logged, never raised: the
    lockout holds whatever the alert does."""
    username, ip_address = line["username"], line["ip_address"]
    until = datetime.fromisoformat(line["locked_until"])
    subject = f"Admin login locked out: {username!r} from {ip_address}"
    body = (
        f"{line['failures']} failed logins counted against the username {username!r} or the address {ip_address}; "
        f"logins for either are refused until {until:%Y-%m-%d %H:%M:%S} UTC. "
        "If it was someone of yours: manage.py axes_reset_username <name> or axes_reset_ip <address>."
    )
    try:
        mail_admins(subject, body)
    except outbound.DELIVERY_ERRORS:
        logger.exception("could not mail the admins about a login lockout")
    if settings.SCHEDULER_WEBHOOK_URL:
        error = outbound.post(
            settings.SCHEDULER_WEBHOOK_URL,
            body=json.dumps({"text": f"{subject}\n{body}", "source": "tiffin", **line}).encode(),
            headers={"Content-Type": "application/json", "User-Agent": "tiffin-alerts"},
            timeout=settings.SCHEDULER_WEBHOOK_TIMEOUT_SECONDS,
        )
        if error is not None:
            logger.warning("webhook %s did not take a login lockout: %s", _safe(settings.SCHEDULER_WEBHOOK_URL), error)
