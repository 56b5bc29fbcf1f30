"""Admin for the engine: job runs (read-only, with their events), schedules with the
operator's actions, the schedules dashboard and the cron explainer.

Nothing here writes a row itself. Every action calls ``scheduling.services``, so it goes
through the same claim path, conditional updates and refusals as the scheduler. Each
action needs its own permission (``pause_schedule``, ``run_schedule``, ``rerun_jobrun``);
staff without it see the pages but not the actions, and a forged POST naming a hidden
action is refused by Django's action form (the action is not among its choices).
Every action that changes something is written to the admin log with the user.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django_q.models import Schedule as DjangoQSchedule

from operations import views
from scheduling import cron, services, sql
from scheduling.models import (
    ENQUEUED_SINCE,
    JobRun,
    JobRunEvent,
    Overlap,
    RunAlert,
    RunStatus,
    Schedule,
    SkipReason,
    Trigger,
)
from scheduling.registry import UnknownJobError, registry
from scheduling.selectors import job_last_run, schedule_next_fire
from tiffin import clock
from tiffin.admin_lists import BoundedPaginator

if TYPE_CHECKING:
    _JobRunAdmin = admin.ModelAdmin[JobRun]
    _ScheduleAdmin = admin.ModelAdmin[Schedule]
    _RunAlertAdmin = admin.ModelAdmin[RunAlert]
    _EventInline = admin.TabularInline[JobRunEvent, JobRun]
else:  # ModelAdmin is generic only in django-stubs
    _JobRunAdmin = _ScheduleAdmin = _RunAlertAdmin = admin.ModelAdmin
    _EventInline = admin.TabularInline

# The admin index gets an Operations box linking the dashboard, the explainer, /healthz.
# (An app's admin/index.html would lose to django.contrib.admin's, which is listed first.)
admin.site.index_template = "admin/scheduling/index.html"
# No navigation sidebar: beside a list's filters it leaves a 1,280 px laptop about 630 px
# for the columns, and the index and breadcrumbs already lead everywhere it does.
admin.site.enable_nav_sidebar = False

# What an operator's request can be refused with (the message is for the operator).
REFUSALS = (services.SchedulingError, UnknownJobError, cron.CronError)


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _span(span: timedelta | None) -> str:
    if span is None:
        return "-"
    seconds = span.total_seconds()
    if abs(seconds) < 60:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min {int(seconds % 60)} s"


class ReadOnlyMixin:
    """Rows written only by the engine: viewable, never added, edited or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobNameFilter(admin.SimpleListFilter):
    """Filter by declared job (from the registry: no DISTINCT over job_runs)."""

    title = "job"
    parameter_name = "job_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(job.name, job.name) for job in registry.all()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(job_name=self.value()) if self.value() else queryset


class SkipReasonFilter(admin.SimpleListFilter):
    """Filter skipped runs by reason: ``status = 'skipped'`` too, so the (status,
    scheduled_for) index job_run_status_rare finds them among millions of other runs."""

    title = "skip reason"
    parameter_name = "skip_reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in SkipReason.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        return queryset.filter(status=RunStatus.SKIPPED, skip_reason=self.value())


class RunStatusFilter(admin.ChoicesFieldListFilter):
    """The status filter; for ``enqueued``, ``enqueued_at IS NOT NULL`` too (every enqueued
    run has it: the check job_run_enqueued_has_enqueued_at), so the partial index
    job_run_enqueued_since serves the list: the in-flight indexes serve only statements
    that test their key (scheduling.models)."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        filtered = super().queryset(request, queryset)
        assert filtered is not None
        if self.used_parameters.get(self.lookup_kwarg) in (RunStatus.ENQUEUED, [RunStatus.ENQUEUED]):
            return filtered.filter(ENQUEUED_SINCE)
        return filtered


# --- Job runs ---------------------------------------------------------------------------


class JobRunEventInline(ReadOnlyMixin, _EventInline):
    model = JobRunEvent
    fields = ("at", "kind", "attempt", "fence", "epoch", "worker", "message")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="epoch")
    def epoch(self, event: JobRunEvent) -> str:
        """The epoch of the event's fence: attempts of one run under two epochs were cut
        off by a failover."""
        return "-" if event.fence is None else str(sql.fence_epoch(event.fence))


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyMixin, _JobRunAdmin):
    # Fits 1,280 px: what ran, when it was meant to, how it went. The fence and the worker
    # (with its epoch) are on the run's page.
    list_display = ("id", "job_name", "subject", "scheduled_for", "trigger", "status", "attempts", "late_by", "took")
    # Every filter has fixed choices (the registry's jobs, the model's choices) and an index
    # behind it: job_run_by_job, job_run_status_rare (the failures and skips; succeeded and
    # scheduled runs through job_run_recent, enqueued and running ones through
    # job_run_enqueued_since and job_run_running), job_run_by_hand (trigger manual/backfill;
    # cron and delayed rows are most of the table). The default ordering
    # (-scheduled_for, -id) is served by job_run_recent, and so is the date drill-down,
    # which offers calendar days (jobrun/change_list.html) instead of a DISTINCT.
    list_filter = (JobNameFilter, ("status", RunStatusFilter), "trigger", SkipReasonFilter)
    date_hierarchy = "scheduled_for"
    search_fields = ("=id", "subject", "=job_name")
    # job_runs is the engine's largest table: counted up to a limit, with the planner's
    # estimate beyond it, and never a second COUNT(*) over all of it.
    paginator = BoundedPaginator
    show_full_result_count = False
    readonly_fields = ("epoch", "late_by", "took")
    fieldsets = (
        (None, {"fields": ("job_name", "subject", "scheduled_for", "status", "skip_reason", "trigger")}),
        ("Execution", {"fields": ("attempts", "fence", "epoch", "worker", "late_by", "took", "result")}),
        (
            "Times (UTC)",
            {"fields": ("due_at", "created_at", "enqueued_at", "started_at", "heartbeat_at", "finished_at")},
        ),
        ("Error", {"fields": ("error",)}),
    )
    inlines = (JobRunEventInline,)
    actions = ("rerun_runs",)

    @admin.display(description="epoch")
    def epoch(self, run: JobRun) -> str:
        """The epoch of the run's fence (the primary's timeline when it started): a run of
        an older epoch than its neighbours was started before a failover."""
        return "-" if run.fence is None else str(sql.fence_epoch(run.fence))

    @admin.display(description="late by")
    def late_by(self, run: JobRun) -> str:
        if run.trigger in (Trigger.MANUAL, Trigger.BACKFILL):
            return "- (by hand)"
        return _span(run.late_by)

    @admin.display(description="took")
    def took(self, run: JobRun) -> str:
        return _span(run.duration(now=clock.now()))

    def has_rerun_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("scheduling.rerun_jobrun")

    @admin.action(description="Re-run the selected abandoned or dead runs (new fence)", permissions=["rerun"])
    def rerun_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        now, actor = clock.now(), _actor(request)
        for run in queryset.order_by("scheduled_for", "id"):
            try:
                services.run_rerun(run_id=run.id, actor=actor, now=now)
            except REFUSALS as error:
                self.message_user(request, f"Refused: {error}.", messages.WARNING)
                continue
            self.log_change(request, run, f"Re-run requested (attempt {run.attempts + 1}, a new fence)")
            self.message_user(request, f"Run {run.id} of {run.job_name} is enqueued again.", messages.SUCCESS)


# --- Schedules --------------------------------------------------------------------------


class BackfillForm(forms.Form):
    start = forms.DateTimeField(
        help_text=f"UTC, e.g. 2027-03-01 00:00, not before {services.EARLIEST_LOGICAL_TIME:%Y-%m-%d}. "
        "Ticks from this instant..."
    )
    end = forms.DateTimeField(
        help_text=f"...up to and including this one (not in the future). At most {services.MAX_BACKFILL_SPAN.days} "
        f"days and {services.MAX_BACKFILL_TICKS} ticks per backfill; weekly-payouts is never backfilled "
        "(catch_up_payouts pays now)."
    )
    order = forms.ChoiceField(
        choices=[
            ("sequential", "One after another, oldest first: each tick starts once the one before it has finished"),
            ("policy", "As the job's overlap policy says (forbid: a tick that finds another still running is skipped)"),
        ],
        initial="sequential",
        required=False,  # not given: one after another
        widget=forms.RadioSelect,
        label="Overlap",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and start < services.EARLIEST_LOGICAL_TIME:
            self.add_error("start", f"Give an instant from {services.EARLIEST_LOGICAL_TIME:%Y-%m-%d} on.")
        elif start and end and start >= end:
            self.add_error("end", "The end must be after the start.")
        elif start and end and end - start > services.MAX_BACKFILL_SPAN:
            self.add_error("end", f"A backfill spans at most {services.MAX_BACKFILL_SPAN.days} days: split the range.")
        return data


# What a tick of a job that overlaps another run of it does, by the job's policy.
OVERLAP_OUTCOMES = {
    Overlap.ALLOW: "several may run at once",
    Overlap.FORBID: "a tick that finds another still running is skipped",
    Overlap.QUEUE: "each starts once the one before it has finished",
    Overlap.REPLACE: "a later tick supersedes an earlier one still running",
}


def _backfill_outcome(schedule: Schedule, claimed: int, *, sequential: bool) -> str:
    """What the backfill will do, in the words its message uses."""
    if not claimed:
        return "no new runs (every tick in the range already has one)"
    runs = f"{claimed} new run{'s' if claimed != 1 else ''}"
    if sequential:
        return f"{runs}, to run one after another, oldest first (each starts once the one before it has finished)"
    policy = Overlap(schedule.overlap)
    return f"{runs}, started as workers take them under the job's overlap policy, {policy}: {OVERLAP_OUTCOMES[policy]}"


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyMixin, _ScheduleAdmin):
    # Fits 1,280 px: the kind is in the schedule column, the local next fire under the UTC one.
    list_display = ("job_name", "schedule", "policies", "next_fire", "last_run", "state")
    list_filter = ("kind", "paused")
    search_fields = ("job_name",)
    actions = ("pause_schedules", "resume_schedules", "run_now", "backfill")
    change_list_template = "admin/scheduling/schedule/change_list.html"

    # -- columns

    @admin.display(description="schedule")
    def schedule(self, schedule: Schedule) -> str:
        return f"{schedule.cron} ({schedule.timezone})" if schedule.cron else "delayed (runs created by code)"

    @admin.display(description="policies")
    def policies(self, schedule: Schedule) -> str:
        deadline = f" {schedule.misfire_deadline_seconds}s" if schedule.misfire_deadline_seconds else ""
        return f"overlap {schedule.overlap}, misfire {schedule.misfire}{deadline}, {schedule.max_attempts} attempts"

    def _next_fire(self, schedule: Schedule) -> datetime | None:
        return schedule_next_fire(schedule=schedule, now=clock.now())

    @admin.display(description="next fire")
    def next_fire(self, schedule: Schedule) -> str | SafeString:
        """In UTC, and under it in the job's zone when that is not UTC."""
        if not registry.has(schedule.job_name):
            return "retired: no code declares it"
        tick = self._next_fire(schedule)
        if tick is None:
            return "-"
        local = tick.astimezone(cron.zone(schedule.timezone))
        if local.utcoffset() == timedelta(0):
            return f"{tick:%Y-%m-%d %H:%M} UTC"
        return format_html(
            '{} UTC<span class="local">{}</span>', f"{tick:%Y-%m-%d %H:%M}", f"{local:%Y-%m-%d %H:%M %Z}"
        )

    @admin.display(description="last run")
    def last_run(self, schedule: Schedule) -> str:
        run = job_last_run(job_name=schedule.job_name)
        return f"{run.scheduled_for:%Y-%m-%d %H:%M} UTC {run.status}" if run else "never"

    @admin.display(description="state", ordering="paused")
    def state(self, schedule: Schedule) -> str:
        return f"paused by {schedule.paused_by or '?'}" if schedule.paused else "active"

    # -- permissions of the actions

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("scheduling.pause_schedule")

    def has_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("scheduling.run_schedule")

    # -- actions

    @admin.action(description="Pause the selected jobs", permissions=["pause"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._toggle(request, queryset, services.schedule_pause, "paused")

    @admin.action(description="Resume the selected jobs", permissions=["pause"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._toggle(request, queryset, services.schedule_resume, "resumed")

    def _toggle(
        self, request: HttpRequest, queryset: QuerySet[Schedule], service: Callable[..., bool], verb: str
    ) -> None:
        now, actor = clock.now(), _actor(request)
        for schedule in queryset:
            try:
                changed = service(job_name=schedule.job_name, actor=actor, now=now)
            except REFUSALS as error:
                self.message_user(request, f"Refused: {error}.", messages.WARNING)
                continue
            if changed:
                self.log_change(request, schedule, verb.capitalize())
                self.message_user(request, f"{schedule.job_name} {verb}.", messages.SUCCESS)
            else:
                self.message_user(request, f"{schedule.job_name} was already {verb}.", messages.INFO)

    @admin.action(description="Run the selected cron jobs now", permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        """Claim a manual run whose logical time is now, to the minute: a double submit
        in the same minute finds the run already claimed and runs nothing more."""
        now, actor = clock.now(), _actor(request)
        logical = now.replace(second=0, microsecond=0)
        for schedule in queryset:
            if not schedule.cron:
                self.message_user(
                    request, f"{schedule.job_name} is a delayed job: code creates its runs.", messages.WARNING
                )
                continue
            try:
                run = services.run_claim_manual(job_name=schedule.job_name, scheduled_for=logical, now=now)
            except REFUSALS as error:
                self.message_user(request, f"Refused: {error}.", messages.WARNING)
                continue
            if run is None:
                self.message_user(
                    request, f"{schedule.job_name} already has a run at {logical:%H:%M} UTC.", messages.INFO
                )
                continue
            self.log_change(request, schedule, f"Run now by {actor}: run {run.id} @ {logical:%Y-%m-%d %H:%M} UTC")
            self.message_user(request, f"{schedule.job_name}: run {run.id} enqueued.", messages.SUCCESS)

    @admin.action(description="Backfill a time range of the selected cron jobs…", permissions=["run"])
    def backfill(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> TemplateResponse | None:
        """First show the range form; when it comes back valid, claim each tick in it
        through the normal claim path (trigger backfill; claimed ticks are left alone)."""
        form = BackfillForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            data = form.cleaned_data
            sequential = data["order"] != "policy"
            self._backfill(request, queryset, start=data["start"], end=data["end"], sequential=sequential)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Backfill a time range",
            "opts": self.opts,
            "form": form,
            "schedules": list(queryset),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "max_ticks": services.MAX_BACKFILL_TICKS,
            "max_days": services.MAX_BACKFILL_SPAN.days,
        }
        return TemplateResponse(request, "admin/scheduling/schedule/backfill.html", context)

    def _backfill(
        self, request: HttpRequest, queryset: QuerySet[Schedule], *, start: datetime, end: datetime, sequential: bool
    ) -> None:
        now, actor = clock.now(), _actor(request)
        span = f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
        for schedule in queryset:
            try:
                won = services.runs_backfill(
                    job_name=schedule.job_name, start=start, end=end, actor=actor, now=now, one_after_another=sequential
                )
            except REFUSALS as error:
                self.message_user(request, f"Refused for {schedule.job_name}: {error}.", messages.WARNING)
                continue
            what = _backfill_outcome(schedule, len(won), sequential=sequential)
            self.log_change(request, schedule, f"Backfilled {span}: {what}")
            self.message_user(request, f"{schedule.job_name}, {span}: {what}.", messages.SUCCESS)

    # -- extra pages

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("dashboard/", wrap(self.dashboard_view), name="scheduling_dashboard"),
            # Not behind the login: old links to the admin's explainer lead anyone to it.
            path("explain/", self.explainer_view, name="scheduling_cron_explainer"),
            *super().get_urls(),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """The dashboard; its buttons post the changelist's actions back here, so they
        pass the same permission checks, then return to the dashboard at the job's section."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            response = self.response_action(request, queryset=self.get_queryset(request))
            if response is None or isinstance(response, HttpResponseRedirect):  # done: back to the job
                return HttpResponseRedirect(self._back_to_job(request))
            return response  # a step of the action (the backfill's range form)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "can_pause": self.has_pause_permission(request),
            "can_run": self.has_run_permission(request),
            "changelist_url": reverse("admin:scheduling_schedule_changelist"),
        }
        return views.dashboard(request, context=context)

    def _back_to_job(self, request: HttpRequest) -> str:
        """The dashboard again, at the section of the job acted on (its buttons act on one
        job), where its confirmation is shown."""
        query = request.GET.copy()
        pks = [pk for pk in request.POST.getlist(ACTION_CHECKBOX_NAME) if pk.isdigit()]
        schedule = Schedule.objects.filter(pk__in=pks).first() if len(pks) == 1 else None
        if schedule is None:
            return request.get_full_path()
        query["job"] = schedule.job_name
        return f"{request.path}?{query.urlencode()}#job-{schedule.job_name}"

    def explainer_view(self, request: HttpRequest) -> HttpResponse:
        """The cron explainer is public (it reads no data): the admin's link leads there."""
        query = request.META.get("QUERY_STRING", "")
        return HttpResponseRedirect(reverse("cron_explainer") + (f"?{query}" if query else ""))


# --- Alerts -----------------------------------------------------------------------------


@admin.register(RunAlert)
class RunAlertAdmin(ReadOnlyMixin, _RunAlertAdmin):
    list_display = ("alerted_at", "kind", "job_name", "subject", "scheduled_for", "run_id", "detail", "resolved_at")
    list_filter = ("kind", JobNameFilter, ("resolved_at", admin.EmptyFieldListFilter))
    date_hierarchy = "alerted_at"


# --- django-q2's own scheduler ----------------------------------------------------------

# django-q2 registers its "Scheduled tasks" (with an Add button) in the admin. Tiffin turns
# that scheduler off (Q_CLUSTER["scheduler"] is False: the schedules above replace it), so
# a task added there would never run. Its queue and result pages stay, for debugging.
if admin.site.is_registered(DjangoQSchedule):
    admin.site.unregister(DjangoQSchedule)
