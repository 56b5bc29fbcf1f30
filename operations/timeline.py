"""The dashboard's timeline of each cron job: the ticks its schedule expected against the
runs job_runs holds (``jobs_timeline``, ``job_timeline``), then the picture of them in SVG
coordinates (``timeline_draw``), which the template only draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from django.conf import settings

from scheduling import cron
from scheduling.models import JobRun, Schedule, Trigger
from scheduling.registry import Job, registry

# --- The data: expected ticks against job_runs -------------------------------------------

# A run that started later than this after its tick is drawn (and counted) as late.
LATE_AFTER = timedelta(minutes=1)
# Most ticks drawn per job; a denser job shows its newest ones (an SVG of a few thousand
# marks is still quick, but no longer readable).
TIMELINE_MAX_TICKS = 1000
# The columns the timeline shows (not the error text or the result, which can be long).
TIMELINE_FIELDS = (
    "job_name",
    "subject",
    "scheduled_for",
    "status",
    "trigger",
    "skip_reason",
    "started_at",
    "finished_at",
)
# What a tick with no run is, depending on its age (see CheckWindow's grace).
MISSED, PENDING = "missed", "pending"


@dataclass(frozen=True)
class TimelineTick:
    scheduled_for: datetime
    run: JobRun | None
    # A RunStatus value, MISSED (old enough to have been claimed) or PENDING (too young).
    outcome: str

    @property
    def lateness(self) -> timedelta | None:
        return None if self.run is None else self.run.lateness

    @property
    def late(self) -> bool:
        return self.lateness is not None and self.lateness > LATE_AFTER


@dataclass(frozen=True)
class JobTimeline:
    job: Job
    start: datetime
    end: datetime
    ticks: list[TimelineTick]
    # Manual and backfill runs whose logical time is not a tick, within the drawn span.
    other_runs: list[JobRun]
    # Ticks of the window left out because of TIMELINE_MAX_TICKS (the oldest ones).
    ticks_not_shown: int


# A timeline shows about this many of its job's ticks unless a span is asked for: a
# minutely probe its last hour, an hourly job two days, a weekly one its longest span.
TIMELINE_FITTED_TICKS = 48
TIMELINE_MIN_SPAN, TIMELINE_MAX_SPAN = timedelta(hours=1), timedelta(days=35)


def jobs_timeline(*, now: datetime, days: int | None) -> list[JobTimeline]:
    """For every cron job, its ticks against their runs: over the last ``days`` days, or
    (None) over a span fitted to the job (timeline_fitted_start)."""
    schedules = {schedule.job_name: schedule for schedule in Schedule.objects.all()}
    timelines = []
    for job in registry.cron_jobs():
        schedule = schedules.get(job.name)
        start = now - timedelta(days=days) if days else timeline_fitted_start(job=job, schedule=schedule, now=now)
        timelines.append(job_timeline(job=job, schedule=schedule, start=start, now=now))
    return timelines


def timeline_fitted_start(*, job: Job, schedule: Schedule | None, now: datetime) -> datetime:
    """Where a job's timeline starts when no span is asked for.

    1. The span of its next TIMELINE_FITTED_TICKS ticks (a cron schedule repeats, so the
       last ones took about as long), within TIMELINE_MIN_SPAN and TIMELINE_MAX_SPAN.
    2. No earlier than the minute it was first registered: nothing was expected before,
       so a job two days old shows its two days, not five empty weeks.
    3. But back to its last TIMELINE_FITTED_TICKS cron runs (within TIMELINE_MAX_SPAN):
       a history older than the registration (a simulation's, handed over to the real
       clock) is shown, not hidden behind an empty span.
    """
    ahead = cron.next_ticks(job.cron, job.timezone, now, TIMELINE_FITTED_TICKS)
    span = min(max(ahead[-1] - now if ahead else TIMELINE_MAX_SPAN, TIMELINE_MIN_SPAN), TIMELINE_MAX_SPAN)
    start = now - span
    if schedule is not None:
        start = max(start, schedule.first_seen_at.replace(second=0, microsecond=0))
    history = _oldest_of_last_cron_runs(job_name=job.name, since=now - TIMELINE_MAX_SPAN)
    if history is not None:
        # A minute before it: the window is (start, now], and the mark is off the edge.
        start = min(start, history.replace(second=0, microsecond=0) - timedelta(minutes=1))
    return min(start, now - TIMELINE_MIN_SPAN)


def _oldest_of_last_cron_runs(*, job_name: str, since: datetime) -> datetime | None:
    # The claim key index (job_name, subject, scheduled_for) read backwards, at most
    # TIMELINE_FITTED_TICKS rows.
    newest = JobRun.objects.filter(
        job_name=job_name, subject="", trigger=Trigger.CRON, scheduled_for__gt=since
    ).order_by("-scheduled_for")
    times = list(newest.values_list("scheduled_for", flat=True)[:TIMELINE_FITTED_TICKS])
    return times[-1] if times else None


def job_timeline(*, job: Job, schedule: Schedule | None, start: datetime, now: datetime) -> JobTimeline:
    """One job's timeline over (start, now].

    1. Its ticks: those its schedule produced since its first registration (older ticks
       were never expected), and those of its cron runs (a tick claimed before the
       registration, a simulation's history, is a tick all the same); the newest
       TIMELINE_MAX_TICKS of them.
    2. Its runs in the window with an empty subject, matched to ticks by logical time
       (served by the claim key index); the rest are manual or backfill runs.
    3. A tick without a run is missed once older than the check's grace, else pending.
    """
    expected_from = max(start, schedule.first_seen_at) if schedule is not None else now
    window = JobRun.objects.filter(job_name=job.name, subject="", scheduled_for__gt=start, scheduled_for__lte=now)
    runs = {run.scheduled_for: run for run in window.only(*TIMELINE_FIELDS)}
    claimed = {when for when, run in runs.items() if run.trigger == Trigger.CRON}
    ticks = sorted(claimed.union(cron.ticks_between(job.cron, job.timezone, expected_from, now)))
    shown = ticks[-TIMELINE_MAX_TICKS:]
    grace_edge = now - timedelta(seconds=settings.SCHEDULER_CHECK_GRACE_SECONDS)
    drawn = [_timeline_tick(tick, runs.get(tick), grace_edge) for tick in shown]
    on_ticks, first_drawn = set(ticks), shown[0] if shown else start
    others = sorted(
        (run for when, run in runs.items() if when not in on_ticks and when >= first_drawn),
        key=lambda run: run.scheduled_for,
    )
    return JobTimeline(job, start, now, drawn, others, len(ticks) - len(shown))


def _timeline_tick(tick: datetime, run: JobRun | None, grace_edge: datetime) -> TimelineTick:
    if run is not None:
        return TimelineTick(tick, run, str(run.status))
    return TimelineTick(tick, None, MISSED if tick <= grace_edge else PENDING)


# --- The picture: the timeline in SVG coordinates ----------------------------------------

# The timeline picture: a row of expected ticks over a row of runs, WIDTH user units wide.
WIDTH, TICK_Y, TICK_H, RUN_Y, RUN_H, AXIS_Y, HEIGHT = 900.0, 6.0, 10.0, 24.0, 16.0, 44.0, 60.0
# A late run is drawn at least this far right of its tick, however short the delay.
MIN_LATE_OFFSET = 3.0


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
        parts.append(f"started {span_text(tick.lateness)} {'late' if tick.late else 'after the tick'}")
    duration = tick.run.duration()
    if duration is not None:
        parts.append(f"took {span_text(duration)}")
    return ", ".join(parts)


def span_text(span: timedelta) -> str:
    """A span as the dashboard writes it: 7.5 s, 42 s, 15 min, 3.2 h."""
    seconds = span.total_seconds()
    if seconds < 120:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
