"""Views: /healthz for probes, /metrics for Prometheus, and the staff's schedules dashboard
(its timeline is ``operations.timeline``). The cron explainer is an app of its own
(``explainer``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from operations.alerts import alerts_open_count, alerts_open_groups
from operations.metrics import CONTENT_TYPE, metrics_render, token_accepted
from operations.timeline import LATE_AFTER, jobs_timeline, span_text, timeline_draw
from scheduling.selectors import jobs_overview, scheduler_last_pass_at
from tiffin import clock


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database answers and some scheduler passed recently; 503 otherwise.

    ``open_problems`` is the number of problems the last missed-run check saw (its
    alerts not yet resolved). It is reported, not judged: a dead job is an alert for a
    person, not a reason for a load balancer to take a healthy web server out.
    """
    now = clock.now()
    database, last_pass, open_problems, groups = _probe()
    age = None if last_pass is None else round((now - last_pass).total_seconds(), 3)
    max_age = settings.SCHEDULER_HEALTHZ_MAX_AGE_SECONDS
    healthy = database == "ok" and age is not None and age <= max_age
    body = {
        "status": "ok" if healthy else "unhealthy",
        "database": database,
        "scheduler_last_pass_age_seconds": age,
        "scheduler_max_age_seconds": max_age,
        "open_problems": open_problems,
        # The same problems alike together (job, kind, count, range of logical times).
        "open_problem_groups": groups,
    }
    response = JsonResponse(body, status=200 if healthy else 503)
    # Answered ahead of SecurityMiddleware (see operations.middleware), so set its header here.
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _probe() -> tuple[str, datetime | None, int | None, list[dict[str, Any]] | None]:
    try:
        open_count = alerts_open_count()
        return "ok", scheduler_last_pass_at(), open_count, alerts_open_groups() if open_count else []
    except DatabaseError:
        connection.close()  # do not hand a broken connection to the next request
        return "unreachable", None, None, None


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition (scheduling.metrics): 404 unless METRICS_ENABLED, 401
    without the bearer token when METRICS_BEARER_TOKEN is set. Never behind a login:
    Prometheus cannot log in."""
    if not settings.METRICS_ENABLED:
        return HttpResponse("metrics are off (METRICS_ENABLED)\n", status=404, content_type="text/plain")
    if not token_accepted(request.headers.get("Authorization", "")):
        response = HttpResponse("a bearer token is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    response = HttpResponse(metrics_render(now=clock.now()), content_type=CONTENT_TYPE)
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- The schedules dashboard ------------------------------------------------------------

MAX_DAYS = 35

# The newest runs listed for each job, so its last outcomes show without a click.
RECENT_RUNS = 5


def dashboard(request: HttpRequest, *, context: dict[str, Any]) -> HttpResponse:
    """Every job with its schedule, next fire times, last runs and timeline picture.

    Each timeline spans about its job's last TIMELINE_FITTED_TICKS ticks (operations.timeline), or the last
    ``?days=N`` for every job. After an action on a job (``?job=NAME``, the page returning
    to that job's section), its confirmation is shown in that section, not at the top.
    """
    now = clock.now()
    days = _days(request.GET.get("days"))
    overviews = jobs_overview(now=now, count=3, recent=RECENT_RUNS)
    drawings = {t.job.name: timeline_draw(t) for t in jobs_timeline(now=now, days=days)}
    rows = [{"overview": overview, "drawing": drawings.get(overview.job.name)} for overview in overviews]
    context.update(
        {
            "title": "Schedules dashboard",
            "rows": rows,
            "days": days,
            "now": now,
            "late_after": span_text(LATE_AFTER),
            "focus": request.GET.get("job", ""),
        }
    )
    return TemplateResponse(request, "admin/scheduling/dashboard.html", context)


def _days(raw: str | None) -> int | None:
    """The span asked for, in days (1 to MAX_DAYS), or None for each job's fitted span."""
    if not raw:
        return None
    try:
        return min(max(int(raw), 1), MAX_DAYS)
    except ValueError:
        return None
