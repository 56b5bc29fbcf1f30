"""Views: /healthz for probes, /metrics for Prometheus, the staff's schedules dashboard
(its timeline is ``scheduling.timeline``), and the cron explainer (public at /cron/: it
reads no data)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from scheduling import cron
from scheduling.alerts import alerts_open_count, alerts_open_groups
from scheduling.explain import MAX_COUNT, cron_explain
from scheduling.metrics import CONTENT_TYPE, metrics_render, token_accepted
from scheduling.selectors import jobs_overview, scheduler_last_pass_at
from scheduling.timeline import LATE_AFTER, jobs_timeline, span_text, timeline_draw
from tiffin import clock
from tiffin.client_ip import client_ip_address
from tiffin.ratelimit import rate_exceeded


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
    # Answered ahead of SecurityMiddleware (see scheduling.middleware), so set its header here.
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

    Each timeline spans about its job's last TIMELINE_FITTED_TICKS ticks (scheduling.timeline), or the last
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


# --- The cron explainer -----------------------------------------------------------------


DEFAULT_FIRE_TIMES = 5


class CronExplainForm(forms.Form):
    expression = forms.CharField(
        max_length=cron.MAX_EXPRESSION_LENGTH, help_text="Five fields: minute hour day-of-month month day-of-week."
    )
    zone = forms.CharField(
        max_length=64, required=False, initial="UTC", help_text="The IANA time zone it runs in, e.g. Europe/London."
    )
    count = forms.IntegerField(
        min_value=1, max_value=MAX_COUNT, required=False, initial=DEFAULT_FIRE_TIMES, help_text="Fire times to list."
    )

    def clean_zone(self) -> str:
        name: str = self.cleaned_data.get("zone") or "UTC"
        try:
            cron.zone(name)
        except cron.CronError as error:
            raise forms.ValidationError(str(error)) from None
        return name


@dataclass(frozen=True)
class TypedField:
    """One whitespace-separated token of what was typed, under the field name it fills."""

    name: str
    text: str
    bad: bool


@require_safe
def cron_explainer_public(request: HttpRequest) -> HttpResponse:
    """The explainer for anyone, logged in or not, under the admin's look. Visitors who
    are not staff are held to settings.CRON_EXPLAINER_REQUESTS_PER_MINUTE per client
    address (``tiffin.client_ip``), counted in the database so every process and server
    shares the count (``tiffin.ratelimit``)."""
    if not request.user.is_staff and _over_rate(request):
        response = HttpResponse(
            "Too many explanations asked from your address in the last minute: wait a minute and try again.",
            status=429,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = "60"
        return response
    return cron_explainer(request, context=admin.site.each_context(request))


def _over_rate(request: HttpRequest) -> bool:
    return rate_exceeded(
        cap="cron-explainer",
        client=client_ip_address(request),
        limit=settings.CRON_EXPLAINER_REQUESTS_PER_MINUTE,
        now=clock.now(),
    )


def cron_explainer(request: HttpRequest, *, context: dict[str, Any]) -> HttpResponse:
    """The explainer page: a GET form (its URL can be shared), the explanation below; the
    page's script asks again as the expression is typed and swaps in the new answer.

    Whatever is typed, the answer is this page: a bad expression or zone becomes an error
    on its field, naming the cron field at fault (a 500 here would be a bug).
    """
    form = CronExplainForm(request.GET if "expression" in request.GET else None)
    explanation, typed, suggestion = None, [], None
    if form.is_valid():
        data = form.cleaned_data
        try:
            explanation = cron_explain(
                expr=data["expression"], tz=data["zone"], count=data["count"] or DEFAULT_FIRE_TIMES, after=clock.now()
            )
        except cron.CronError as error:
            typed = _typed_fields(data["expression"], bad=error.field)
            suggestion = getattr(error, "suggestion", None)
            form.add_error("expression", str(error))  # (drops it from cleaned_data)
    elif form.is_bound and "zone" in form.errors and "expression" in form.cleaned_data:
        # A bad zone must not hide a bad expression: both are reported at once.
        try:
            cron.validate(form.cleaned_data["expression"])
        except cron.CronError as error:
            typed = _typed_fields(form.cleaned_data["expression"], bad=error.field)
            suggestion = getattr(error, "suggestion", None)
            form.add_error("expression", str(error))
    context.update(
        {
            "title": "Cron explainer",
            "form": form,
            "explanation": explanation,
            "typed": typed,
            "suggestion": suggestion,
            "zone": form.cleaned_data.get("zone", "UTC") if form.is_bound else "UTC",
        }
    )
    return TemplateResponse(request, "admin/scheduling/explainer.html", context)


def _typed_fields(expression: str, *, bad: str | None) -> list[TypedField]:
    """The typed tokens under their field names, the one at fault marked (five tokens only)."""
    tokens = expression.split()
    if bad is None or len(tokens) != len(cron.FIELD_NAMES):
        return []
    return [TypedField(name, text, name == bad) for name, text in zip(cron.FIELD_NAMES, tokens, strict=True)]
