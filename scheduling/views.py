"""Views: /healthz for probes, and the staff pages (schedules dashboard, cron explainer)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from scheduling.alerts import alerts_open_count
from scheduling.selectors import scheduler_last_pass_at
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
    database, last_pass, open_problems = _probe()
    age = None if last_pass is None else round((now - last_pass).total_seconds(), 3)
    max_age = settings.SCHEDULER_HEALTHZ_MAX_AGE_SECONDS
    healthy = database == "ok" and age is not None and age <= max_age
    body = {
        "status": "ok" if healthy else "unhealthy",
        "database": database,
        "scheduler_last_pass_age_seconds": age,
        "scheduler_max_age_seconds": max_age,
        "open_problems": open_problems,
    }
    return JsonResponse(body, status=200 if healthy else 503)


def _probe() -> tuple[str, datetime | None, int | None]:
    try:
        return "ok", scheduler_last_pass_at(), alerts_open_count()
    except DatabaseError:
        connection.close()  # do not hand a broken connection to the next request
        return "unreachable", None, None
