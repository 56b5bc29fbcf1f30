"""Views: /healthz for probes, /metrics for Prometheus, the staff's schedules dashboard,
and the cron explainer (public at /cron/: it reads no data)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.cache import cache
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from scheduling import cron
from scheduling.alerts import alerts_open_count, alerts_open_groups
from scheduling.explain import MAX_COUNT, cron_explain
from scheduling.metrics import CONTENT_TYPE, metrics_render, token_accepted
from scheduling.selectors import (
    LATE_AFTER,
    MISSED,
    JobTimeline,
    TimelineTick,
    jobs_overview,
    jobs_timeline,
    scheduler_last_pass_at,
)
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

# The timeline picture: a row of expected ticks over a row of runs, WIDTH user units wide.
WIDTH, TICK_Y, TICK_H, RUN_Y, RUN_H, AXIS_Y, HEIGHT = 900.0, 6.0, 10.0, 24.0, 16.0, 44.0, 60.0
# A late run is drawn at least this far right of its tick, however short the delay.
MIN_LATE_OFFSET = 3.0
MAX_DAYS = 35


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Link:
    """From a tick (bottom of the tick row) to its late run (top of the run row)."""

    x1: float
    x2: float
    css: str
    y1: float = TICK_Y + TICK_H
    y2: float = RUN_Y


@dataclass(frozen=True)
class Drawing:
    """A job's timeline in SVG coordinates; the template only draws it."""

    marks: list[Mark]
    links: list[Link]
    gridlines: list[tuple[float, str]]
    counts: dict[str, int]
    timeline: JobTimeline
    width: float = WIDTH
    height: float = HEIGHT
    axis_y: float = AXIS_Y


# The newest runs listed for each job, so its last outcomes show without a click.
RECENT_RUNS = 5


def dashboard(request: HttpRequest, *, context: dict[str, Any]) -> HttpResponse:
    """Every job with its schedule, next fire times, last runs and timeline picture.

    Each timeline spans about its job's last TIMELINE_FITTED_TICKS ticks, or the last
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
            "late_after": _seconds(LATE_AFTER),
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


def timeline_draw(timeline: JobTimeline) -> Drawing:
    """Place each expected tick, its run (offset right by its lateness) and the missed
    slots on the picture; late runs are at least MIN_LATE_OFFSET right of their tick."""
    scale = WIDTH / max((timeline.end - timeline.start).total_seconds(), 1.0)
    bar = min(max(WIDTH / max(len(timeline.ticks), 1) * 0.6, 1.5), 8.0)

    def x_of(moment: datetime) -> float:
        return min(max((moment - timeline.start).total_seconds() * scale, 0.0), WIDTH - bar)

    marks: list[Mark] = []
    links: list[Link] = []
    counts: dict[str, int] = {}
    zone = cron.zone(timeline.job.timezone)
    for tick in timeline.ticks:
        counts[tick.outcome] = counts.get(tick.outcome, 0) + 1
        counts["late"] = counts.get("late", 0) + tick.late
        x_tick, title = x_of(tick.scheduled_for), _tick_title(tick, zone)
        marks.append(Mark(x_tick, TICK_Y, bar, TICK_H, f"tick {tick.outcome}", title))
        if tick.run is None:
            marks.append(Mark(x_tick, RUN_Y, bar, RUN_H, f"slot {tick.outcome}", title))
            continue
        x_run = x_of(tick.run.started_at) if tick.run.started_at else x_tick
        if tick.late:
            x_run = min(max(x_run, x_tick + MIN_LATE_OFFSET), WIDTH - bar)
            links.append(Link(x_tick + bar / 2, x_run + bar / 2, "link late"))
        marks.append(Mark(x_run, RUN_Y, bar, RUN_H, f"run {tick.outcome}{' late' if tick.late else ''}", title))
    for run in timeline.other_runs:
        title = f"{_when(run.scheduled_for, zone)}: {run.trigger} run, {run.status}"
        marks.append(Mark(x_of(run.scheduled_for), RUN_Y, bar, RUN_H, f"run {run.status} manual", title))
    return Drawing(marks, links, _gridlines(timeline, x_of), counts, timeline)


def _gridlines(timeline: JobTimeline, x_of: Callable[[datetime], float]) -> list[tuple[float, str]]:
    """Lines at whole UTC days (a span of more than two days) or hours, labelled, at most
    about twelve labels."""
    span = timeline.end - timeline.start
    unit, label = (timedelta(days=1), "%a %d %b") if span > timedelta(days=2) else (timedelta(hours=1), "%H:%M")
    if unit == timedelta(hours=1) and span > timedelta(hours=12):
        label = "%a %H:%M"
    every = unit * max(int(span / unit) // 12, 1)
    first = timeline.start.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if unit == timedelta(days=1):
        first = first.replace(hour=0) + (timedelta(days=1) if first.hour else timedelta(0))
    lines, moment = [], first
    while moment <= timeline.end:
        lines.append((x_of(moment), f"{moment:{label}}"))
        moment += every
    return lines


def _when(moment: datetime, zone: tzinfo) -> str:
    local = moment.astimezone(zone)
    utc = f"{moment:%Y-%m-%d %H:%M} UTC"
    return utc if local.utcoffset() == timedelta(0) else f"{utc} ({local:%H:%M %Z})"


def _tick_title(tick: TimelineTick, zone: tzinfo) -> str:
    when = _when(tick.scheduled_for, zone)
    if tick.run is None:
        return f"{when}: {'missed, never claimed' if tick.outcome == MISSED else 'not claimed yet'}"
    parts = [f"{when}: {tick.run.status}"]
    if tick.run.skip_reason:
        parts.append(tick.run.get_skip_reason_display().lower())
    if tick.lateness is not None:
        parts.append(f"started {_seconds(tick.lateness)} {'late' if tick.late else 'after the tick'}")
    duration = tick.run.duration()
    if duration is not None:
        parts.append(f"took {_seconds(duration)}")
    return ", ".join(parts)


def _seconds(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds < 120:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


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


# Explanations one client address may ask for per minute on the public page: typing
# (the page asks again a quarter of a second after each pause) stays well under it, a
# script hammering the evaluator does not. Input is capped by the form's field lengths.
PUBLIC_EXPLAINS_PER_MINUTE = 120


@require_safe
def cron_explainer_public(request: HttpRequest) -> HttpResponse:
    """The explainer for anyone, logged in or not, under the admin's look. Visitors who
    are not staff are held to PUBLIC_EXPLAINS_PER_MINUTE per address."""
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
    """A fixed one-minute window per client address, counted in the cache (per process
    with the default local-memory cache: a cap against abuse, not an exact quota)."""
    key = f"cron-explainer:{request.META.get('REMOTE_ADDR', '?')}:{int(clock.now().timestamp() // 60)}"
    if cache.add(key, 1, timeout=90):
        return False
    try:
        return cache.incr(key) > PUBLIC_EXPLAINS_PER_MINUTE
    except ValueError:  # the key expired between add and incr
        return False


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
