"""The strategies side by side: ``simulate --strategy NAME`` runs one deployment of
``simulation.strategies`` (servers, the probe, the faults) and reports on it;
``--compare`` runs them one after another on the same clock, seed and faults and prints
one table.

The faults, at fixed fractions of the window, the same for every strategy:

1. long run: one tick's work lasts ``LONG_RUN_SECONDS``, past the lease (the Redis
   lock's TTL, the claim's heartbeat timeout);
2. pause: another long tick's execution is frozen (SIGSTOP) ``PAUSE_AFTER`` into its
   work, for ``PAUSE_FOR``, past the lease, then resumes (SIGCONT);
3. server down: server 1 (its cron line, or its scheduler and worker) is killed
   (SIGKILL) across several ticks, and restarted ``DOWN_FOR`` later.

A fourth condition is the pooler: ``--pooler`` puts every process behind a private
PgBouncer in transaction mode; ``--compare`` runs the advisory lock and the claim both
ways. Everything is counted from ``simulation_strategy_runs`` (one row per execution)
over the ticks in [start, end).
"""

from __future__ import annotations

import heapq
import importlib
import math
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from operations.monitoring import runs_check
from scheduling import cron
from scheduling.models import IN_FLIGHT_STATUSES, JobRun, JobRunEvent, RunStatus
from scheduling.schedules import schedules_register
from scheduling.selectors import scheduler_last_pass_at
from simulation.models import StrategyRun
from simulation.runner import LATE_WORD_KINDS
from simulation.services import simulation_reset
from simulation.strategies import (
    LEASE_SECONDS,
    LONG_RUNS_VARIABLE,
    NAMESPACE_VARIABLE,
    PROBE_CRON,
    PROBE_JOB,
    Strategy,
    long_runs_text,
    redis_client,
    redis_problem,
)
from support import pgbouncer
from support.processes import Fleet, Process, SimulatedTime, wait_for, wait_while_progressing

LONG_RUN_SECONDS = 200.0
PAUSE_AFTER = timedelta(seconds=30)
PAUSE_FOR = timedelta(minutes=4)
DOWN_FOR = timedelta(minutes=5)
REQUEUE_AFTER_SECONDS = 300
MIN_DURATION = timedelta(minutes=20)  # room for the three faults one after another
# Real seconds the processes get to boot before the clock reaches the start. A case whose
# processes are not all ready by then (a loaded machine) is run again with twice as long.
BOOT_SECONDS = 6.0
BOOT_TRIES = 3
DRAIN_SECONDS = 60.0
# More events than one run records: what a wait counting a run's events counts down from.
STEPS_BOUND = 10**9
# What each kind of process logs once it is ready for the first tick.
READY_MARKERS = {"worker-": "] running.", "scheduler-": " started", "cron-": "cron line ready"}


def cron_line_fires_from(log: str) -> datetime | None:
    """The instant a cron line said it fires from (``strategy_cron``'s ready line), or None
    before it said so."""
    said = re.search(re.escape(READY_MARKERS["cron-"]) + r", firing from (\S+)", log)
    return datetime.fromisoformat(said[1]) if said else None


class BootTooSlowError(Exception):
    """Some process was not ready when the simulated clock reached the start."""


class StrategyFault(StrEnum):
    LONG_RUN = "long-run"
    PAUSE = "pause"
    SERVER_DOWN = "server-down"

    @classmethod
    def parse_list(cls, text: str) -> frozenset[StrategyFault]:
        """'all', 'none' or a comma list such as 'long-run,pause'."""
        words = {word.strip() for word in text.split(",") if word.strip()}
        if words == {"all"}:
            return frozenset(cls)
        if words == {"none"}:
            return frozenset()
        unknown = words - {fault.value for fault in cls}
        if unknown or not words:
            known = ", ".join(fault.value for fault in cls)
            raise ValueError(f"--strategy-faults {text!r}: give all, none, or a comma list of {known}")
        return frozenset(cls(word) for word in words)


@dataclass(frozen=True)
class StrategyCase:
    strategy: Strategy
    pooled: bool = False

    @property
    def label(self) -> str:
        return f"{self.strategy} (PgBouncer)" if self.pooled else str(self.strategy)


COMPARE_CASES = (
    StrategyCase(Strategy.EVERY_SERVER),
    StrategyCase(Strategy.SPECIAL_SERVER),
    StrategyCase(Strategy.REDIS_LOCK),
    StrategyCase(Strategy.ADVISORY_LOCK),
    StrategyCase(Strategy.ADVISORY_LOCK, pooled=True),
    StrategyCase(Strategy.CLAIM),
    StrategyCase(Strategy.CLAIM, pooled=True),
)


@dataclass(frozen=True)
class StrategyPlan:
    servers: int
    workers: int
    start: datetime
    duration: timedelta
    speed: float
    faults: frozenset[StrategyFault]
    environment: dict[str, str] = field(default_factory=dict)
    skews: tuple[float, ...] = ()  # each server's clock offset, seconds (none: all exact)
    pooler_connections: int = pgbouncer.POOL_SIZE  # the pooled cases' PgBouncer's server connections

    def skew(self, number: int) -> float:
        return self.skews[number - 1] if self.skews else 0.0

    @property
    def end(self) -> datetime:
        return self.start + self.duration

    def _minute(self, fraction: float) -> datetime:
        return self.start + timedelta(minutes=int(self.duration.total_seconds() / 60 * fraction))

    @property
    def long_tick(self) -> datetime:
        return self._minute(0.15)

    @property
    def pause_tick(self) -> datetime:
        return self._minute(0.4)

    @property
    def down_at(self) -> datetime:
        # Between two ticks, and long enough after the pause that the frozen worker, once
        # resumed, has had its word (so the two faults never hit one process at once).
        return self._minute(0.7) + timedelta(seconds=20)

    def long_runs(self) -> dict[datetime, float]:
        ticks = {StrategyFault.LONG_RUN: self.long_tick, StrategyFault.PAUSE: self.pause_tick}
        return {tick: LONG_RUN_SECONDS for fault, tick in ticks.items() if fault in self.faults}

    def fault_lines(self) -> list[str]:
        lines = []
        if StrategyFault.LONG_RUN in self.faults:
            lines.append(
                f"long run: the {self.long_tick:%H:%M} tick works {LONG_RUN_SECONDS:g} s (lease {LEASE_SECONDS} s)"
            )
        if StrategyFault.PAUSE in self.faults:
            pause_at = self.pause_tick + PAUSE_AFTER
            lines.append(
                f"pause: the {self.pause_tick:%H:%M} tick's execution frozen at {pause_at:%H:%M:%S} for {PAUSE_FOR}"
            )
        if StrategyFault.SERVER_DOWN in self.faults:
            lines.append(f"server down: server 1 killed at {self.down_at:%H:%M:%S}, back {DOWN_FOR} later")
        return lines


@dataclass
class StrategyResult:
    label: str
    ticks: int = 0
    executions: int = 0
    charges: int = 0
    duplicate_charges: int = 0
    duplicate_executions: int = 0
    missed: int = 0
    noticed: bool | None = None  # None: nothing was missed
    stale_accepted: int = 0
    stale_refused: int = 0
    skipped: str = ""  # why this case could not run here
    events: list[str] = field(default_factory=list)

    @property
    def stale_counts(self) -> tuple[int, int]:
        return (self.stale_accepted, self.stale_refused)

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicate_charges or self.missed or self.stale_accepted)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "exactly_once": self.exactly_once}


def case_problem(case: StrategyCase) -> str:
    """Why ``case`` cannot run against this database and machine, or ''."""
    postgres = connection.vendor == "postgresql"
    if (case.strategy.needs_postgres or case.pooled) and not postgres:
        return "needs PostgreSQL (DATABASE_URL is not postgres://)"
    if case.pooled and pgbouncer.pgbouncer_binary() is None:
        return "needs pgbouncer (make scenario-deps, or apt-get install pgbouncer)"
    if case.strategy.needs_redis:
        return redis_problem()
    return ""


# --- One deployment ---------------------------------------------------------------------


class StrategyDeployment:
    """Start the servers of ``case`` on a fresh clock, inject the plan's faults on time,
    stop everything, and say what each fault hit."""

    def __init__(
        self, plan: StrategyPlan, case: StrategyCase, *, log_dir: Path, lead: float, say: Callable[[str], None]
    ) -> None:
        self.plan = plan
        self.case = case
        self.say = say
        self.clock = SimulatedTime.starting(plan.start, speed=plan.speed, lead=lead)
        self.fleet = Fleet(environment=plan.environment, log_dir=log_dir)
        self.events: list[str] = []
        self.pending: list[tuple[datetime, int, Callable[[], None]]] = []
        self.paused_run: JobRun | None = None  # the claim's run frozen, as its worker had it
        self.resume_at: datetime | None = None  # when the pause ends

    def run(self) -> list[str]:
        with self.fleet:
            self._start_servers()
            self._wait_ready()
            if StrategyFault.PAUSE in self.plan.faults:
                self._at(self.plan.pause_tick + PAUSE_AFTER, self._pause)
            if StrategyFault.SERVER_DOWN in self.plan.faults:
                self._at(self.plan.down_at, self._server_down)
            # A fault's end (a resume, a restart) is carried out even when a loaded
            # machine's late fault pushed it past the window's end.
            while self.pending:
                when, _, action = heapq.heappop(self.pending)
                self.clock.sleep_until(when)
                action()
            self.clock.sleep_until(self.plan.end)
            self._stop()
        return self.events

    def _at(self, when: datetime, action: Callable[[], None]) -> None:
        heapq.heappush(self.pending, (when, len(self.pending) + len(self.events), action))

    def _note(self, line: str) -> None:
        line = f"{self.clock.now():%H:%M:%S} {line}"
        self.events.append(line)
        self.say(f"  {line}")

    def _server_processes(self, number: int) -> list[Process]:
        return [p for p in self.fleet.processes.values() if p.name.endswith(f"-{number}")]

    def _start_servers(self) -> None:
        if self.case.strategy == Strategy.CLAIM:
            # Registered as of the start, so the boot lead claims no ticks before it.
            declare_claim_probe()
            schedules_register(now=self.plan.start - timedelta(microseconds=1))
            for number in range(1, self.plan.servers + 1):
                worker_env = {**self.clock.environment(), "Q_WORKERS": str(self.plan.workers)}
                self.fleet.start(f"worker-{number}", ["worker", "--no-scheduler"], env=worker_env)
                env = self.clock.environment(skew=self.plan.skew(number))
                self.fleet.start(f"scheduler-{number}", ["run_scheduler"], env=env)
            return
        servers = 1 if self.case.strategy == Strategy.SPECIAL_SERVER else self.plan.servers
        for number in range(1, servers + 1):
            command = ["strategy_cron", "--strategy", self.case.strategy, "--server", f"server-{number}"]
            window = ["--since", self.plan.start.isoformat(), "--until", self.plan.end.isoformat()]
            env = self.clock.environment(skew=self.plan.skew(number))
            self.fleet.start(f"cron-{number}", [*command, *window], env=env, may_finish=True)

    def _wait_ready(self) -> None:
        first_tick = window_ticks(self.plan)[0]

        def ready(process: Process) -> bool:
            marker = next(text for prefix, text in READY_MARKERS.items() if process.name.startswith(prefix))
            log = process.log_tail(lines=200)
            if not process.name.startswith("cron-"):
                return marker in log
            # A cron line fires from the later of the start and its own boot: one that read
            # its clock after the first tick would never fire it, however soon it said so
            # (the wait below may see the line just after the clock reached the start).
            since = cron_line_fires_from(log)
            return since is not None and since <= first_tick

        left = self.clock.real_time_at(self.plan.start) - time.time()
        try:
            wait_for(lambda: all(map(ready, self.fleet.processes.values())), timeout=max(left, 0), interval=0.1)
        except TimeoutError:
            late = ", ".join(p.name for p in self.fleet.processes.values() if not ready(p))
            raise BootTooSlowError(f"not ready at the start: {late}") from None

    def _pause(self) -> None:
        victim = self._executing(self.plan.pause_tick)
        if victim is None:
            self._note(f"pause: no execution of the {self.plan.pause_tick:%H:%M} tick in flight, nothing paused")
            return
        victim.send(signal.SIGSTOP)
        self._note(f"pause: SIGSTOP {victim.name}, in the middle of the {self.plan.pause_tick:%H:%M} tick")
        self.resume_at = self.clock.now() + PAUSE_FOR
        self._at(self.resume_at, lambda: self._resume(victim))

    def _resume(self, victim: Process) -> None:
        run = self.paused_run
        if run is not None:
            # The fault is a worker that wakes after its run was taken from it (abandoned
            # once its heartbeat stopped for the lease): the pause outlasts the lease by
            # minutes, but a loaded machine's schedulers may notice late, so it wakes only
            # then. Each scheduler pass, as of a later instant, is a step: a pass as of the
            # planned wake, long after the lease ran out, takes it.
            held = JobRun.objects.filter(id=run.pk, fence=run.fence, status=RunStatus.RUNNING)
            wake = self.resume_at or self.clock.now()

            def not_taken() -> int:  # simulated seconds from the newest pass to the wake, at least 1
                if _fresh_count(held) == 0:
                    return 0
                passed = scheduler_last_pass_at() or self.plan.start
                return max(math.ceil((wake - passed).total_seconds()), 1)

            self._wait_until(not_taken, "the run to be taken from it")
        victim.send(signal.SIGCONT)
        self._note(f"pause: SIGCONT {victim.name}")
        if run is not None:
            # The deployment goes on once its late word was written or refused: at its next
            # heartbeat or at the write, the execution row says so, then the run's event (the
            # SIGSTOP may have come before the row). Each event of the run (its retry's) is a step.
            late = JobRunEvent.objects.filter(run_id=run.pk, fence=run.fence, kind__in=LATE_WORD_KINDS)
            events = JobRunEvent.objects.filter(run_id=run.pk)

            def no_late_word() -> int:
                return 0 if _fresh_count(late) else max(STEPS_BOUND - _fresh_count(events), 1)

            self._wait_until(no_late_word, "its late word")

    def _wait_until(self, left: Callable[[], int], what: str) -> None:
        """Wait until ``left`` is 0, for as long as it keeps falling (``DRAIN_SECONDS`` without a step)."""
        try:
            wait_while_progressing(left, stall=DRAIN_SECONDS, interval=0.05, what=what)
        except TimeoutError:
            self._note(f"pause: gave up waiting for {what}, {DRAIN_SECONDS:g} s after its last step")

    def _executing(self, tick: datetime) -> Process | None:
        """The process executing ``tick`` (waiting a few simulated seconds for it to start)."""
        found: list[Process] = []

        def seen() -> bool:
            close_old_connections()
            if self.case.strategy == Strategy.CLAIM:
                run = JobRun.objects.filter(job_name=PROBE_JOB, scheduled_for=tick, status=RunStatus.RUNNING).first()
                owner = self.fleet.owner_of(int(run.worker.rsplit(":", 1)[-1])) if run and run.worker else None
                self.paused_run = run if owner else None
            else:
                execution = StrategyRun.objects.filter(scheduled_for=tick, finished_at__isnull=True).first()
                owner = self.fleet.processes.get(execution.server.replace("server", "cron")) if execution else None
            found[:] = [owner] if owner else []
            return bool(found)

        try:
            if self.case.strategy == Strategy.CLAIM:
                # On a loaded machine a claimed run may start minutes late: wait for it
                # while the runs before it keep starting (the pause may then end after the
                # window's, and is carried out all the same).
                started = JobRun.objects.filter(job_name=PROBE_JOB, scheduled_for__lte=tick, started_at__isnull=False)
                due = len([t for t in window_ticks(self.plan) if t <= tick])

                def left() -> int:  # the runs up to the tick not started yet, at least 1 until it is seen
                    return 0 if seen() else max(due - _fresh_count(started), 1)

                wait_while_progressing(left, stall=DRAIN_SECONDS, interval=0.02, what="the tick's run starting")
            else:
                timeout = self.clock.real_time_at(self.plan.end - PAUSE_FOR) - time.time()
                wait_for(seen, timeout=max(timeout, 0), interval=0.02, what="an execution in flight")
        except TimeoutError:
            return None
        return found[0]

    def _server_down(self) -> None:
        if self.resume_at is not None and any("SIGSTOP" in p.signals[-1:] for p in self._server_processes(1)):
            # A late pause froze server 1's process: the two faults never hit one process
            # at once, so server 1 goes down just after the resume (and its late word).
            self._at(self.resume_at + timedelta(seconds=1), self._server_down)
            return
        self._wait_between_ticks()
        victims = [p for p in self._server_processes(1) if p.alive()]
        for victim in victims:
            victim.send(signal.SIGKILL)
        names = ", ".join(p.name for p in victims) or "nothing (server 1 runs no process)"
        self._note(f"server down: SIGKILL {names}")
        self._at(self.clock.now() + DOWN_FOR, lambda: self._server_up(victims))

    def _wait_between_ticks(self) -> None:
        """Server 1 goes down between two ticks: a cron line that fires every tick (every
        server, the special server) is killed once it has finished each tick before the
        planned instant, however far a loaded machine's line lags the clock (bounded:
        ``DRAIN_SECONDS`` without a step). A tick that came due meanwhile may be caught in
        flight. A lock strategy's line has no execution of a tick another server took, and
        the claim's runs are meant to be killed mid-run: those are killed on time."""
        if self.case.strategy not in (Strategy.EVERY_SERVER, Strategy.SPECIAL_SERVER):
            return
        ticks = [tick for tick in window_ticks(self.plan) if tick < self.plan.down_at]
        done = StrategyRun.objects.filter(server="server-1", scheduled_for__in=ticks, finished_at__isnull=False)
        try:
            wait_while_progressing(
                lambda: len(ticks) - _fresh_count(done), stall=DRAIN_SECONDS, what="server 1's ticks before the kill"
            )
        except TimeoutError:
            self._note(f"server down: server 1 still short of the ticks before it after {DRAIN_SECONDS:g} s")

    def _server_up(self, victims: list[Process]) -> None:
        for victim in victims:
            if victim.popen is not None:
                victim.popen.wait(timeout=10)  # reap the killed leader before starting it again
            self.fleet.restart(victim.name)
        self._note(f"server up: restarted {', '.join(p.name for p in victims) or 'nothing'}")

    def _stop(self) -> None:
        """Let the window's ticks be fired and finished, however far a loaded machine's
        processes lag the clock (bounded: ``DRAIN_SECONDS`` without a step), then stop
        everything. A cron line fires the ticks before the end and exits; the schedulers
        claim up to the last tick and, while the window's runs finish, abandon and retry
        or requeue the ones a fault lost (so what is counted follows from the faults, not
        from what was in flight when the clock reached the end)."""
        crons = self.fleet.named("cron-")
        if crons:
            try:
                wait_while_progressing(
                    lambda: sum(p.alive() for p in crons), stall=DRAIN_SECONDS, what="cron lines firing"
                )
            except TimeoutError:
                self._note("stop: a cron line still firing a minute after its last step")
            self.fleet.stop(crons)
            return
        last_tick = window_ticks(self.plan)[-1]
        window = JobRun.objects.filter(job_name=PROBE_JOB, scheduled_for__lt=self.plan.end)
        live = window.filter(status__in=IN_FLIGHT_STATUSES)  # a retry waiting for its time too

        def left() -> int:  # the last tick unclaimed counts as one run to go
            return _fresh_count(live) + (not window.filter(scheduled_for=last_tick).exists())

        try:
            wait_while_progressing(left, stall=DRAIN_SECONDS, what="the window's runs finishing")
        except TimeoutError:
            self._note("stop: the window's runs still in flight a minute after their last step")
        self.fleet.stop([*self.fleet.named("scheduler-"), *self.fleet.named("worker-")])


def _fresh_count(queryset: Any) -> int:
    close_old_connections()
    return int(queryset.count())


# --- What it did ----------------------------------------------------------------------


def strategy_result(case: StrategyCase, plan: StrategyPlan) -> StrategyResult:
    """Counts over the ticks in [start, end), from the execution rows (see the module doc)."""
    result, missed = execution_counts(case.strategy, case.label, plan)
    if missed:
        result.noticed = case.strategy == Strategy.CLAIM and _check_reports(missed, plan)
    return result


def window_ticks(plan: StrategyPlan) -> list[datetime]:
    """The probe's ticks in [start, end)."""
    return cron.ticks_between(
        PROBE_CRON, "UTC", plan.start - timedelta(microseconds=1), plan.end - timedelta(seconds=1)
    )


def execution_counts(strategy: str, label: str, plan: StrategyPlan) -> tuple[StrategyResult, list[datetime]]:
    """The table's counts for the execution rows of ``strategy`` over the plan's ticks, and
    the ticks missed (for the caller to say whether anything noticed them). Shared with
    the real tools' rows (bench/peers/alternatives.py), which record the same rows."""
    ticks = window_ticks(plan)
    rows = list(StrategyRun.objects.filter(strategy=strategy, scheduled_for__in=ticks))
    charges = Counter(row.scheduled_for for row in rows if row.charged_at is not None)
    result = StrategyResult(label, ticks=len(ticks), executions=len(rows), charges=sum(charges.values()))
    result.duplicate_charges = sum(n - 1 for n in charges.values())
    result.duplicate_executions = len(rows) - len({row.scheduled_for for row in rows})
    missed = [tick for tick in ticks if not charges[tick]]
    result.missed = len(missed)
    result.stale_accepted = sum(1 for row in rows if row.charged_at is not None and row.stale)
    result.stale_refused = sum(1 for row in rows if row.refused)
    return result, missed


def declare_claim_probe() -> None:
    """Declare the claim's probe in this process's registry too (only when a claim case
    runs: a plain ``simulate`` must not register it)."""
    importlib.import_module("simulation.strategy_jobs")


def _check_reports(missed: list[datetime], plan: StrategyPlan) -> bool:
    """Whether the missed-run check, run after the window, names every missed tick. Only
    the claim keeps the record it reads: the other strategies leave nothing to compare."""
    declare_claim_probe()
    grace = timedelta(seconds=settings.SCHEDULER_CHECK_GRACE_SECONDS)
    reported = {p.scheduled_for for p in runs_check(now=plan.end + grace) if p.job_name == PROBE_JOB}
    return set(missed) <= reported


@contextmanager
def _database_url(case: StrategyCase, plan: StrategyPlan) -> Iterator[dict[str, str]]:
    """The processes' DATABASE_URL override: through a fresh PgBouncer when pooled."""
    if not case.pooled:
        yield {}
        return
    with pgbouncer.pooled_database(settings.DATABASES["default"], pool_size=plan.pooler_connections) as pooled:
        yield {"DATABASE_URL": pooled.url}


@dataclass
class Boot:
    """The boot lead, doubled whenever a case's processes were not ready in time and kept
    for the cases after it."""

    lead: float = BOOT_SECONDS


def run_case(
    plan: StrategyPlan, case: StrategyCase, *, log_dir: Path, boot: Boot, say: Callable[[str], None]
) -> StrategyResult:
    """Forget the previous case, run this one in a deployment of its own, count."""
    problem = case_problem(case)
    if problem:
        say(f"{case.label}: skipped, {problem}")
        return StrategyResult(case.label, skipped=problem)
    say(f"{case.label}: {plan.servers} servers, {plan.duration} from {plan.start:%Y-%m-%d %H:%M} UTC")
    for attempt in range(1, BOOT_TRIES + 1):
        _forget(case)
        with _database_url(case, plan) as url:
            deployment = StrategyDeployment(
                replace(plan, environment={**_case_environment(plan), **url}),
                case,
                log_dir=log_dir / case.label.replace(" (PgBouncer)", "-pgbouncer"),
                lead=boot.lead,
                say=say,
            )
            try:
                events = deployment.run()
                break
            except BootTooSlowError as error:
                if attempt == BOOT_TRIES:
                    raise
                boot.lead *= 2
                say(f"  {error} after {boot.lead / 2:g} s; again with {boot.lead:g} s to boot")
    result = strategy_result(case, plan)
    result.events = events
    return result


def _namespace() -> str:
    return f"tiffin-simulate:{settings.DATABASES['default']['NAME']}"


def _forget(case: StrategyCase) -> None:
    # The database was empty, or reset by --reset, when the comparison began: what goes
    # here are the previous case's own runs, in any settings (payouts still refuse).
    simulation_reset(development=True)
    if case.strategy.needs_redis:
        redis_client().delete(f"{_namespace()}:lock:{PROBE_JOB}")  # a lock a killed run left


def _case_environment(plan: StrategyPlan) -> dict[str, str]:
    return {
        **plan.environment,
        LONG_RUNS_VARIABLE: long_runs_text(plan.long_runs()),
        NAMESPACE_VARIABLE: _namespace(),
        "SCHEDULER_EXTRA_JOB_MODULES": "simulation.strategy_jobs",
        # A task lost with a killed worker is enqueued again after this long (simulated;
        # default 600 s): soon enough to matter inside a window of minutes.
        "SCHEDULER_REQUEUE_AFTER_SECONDS": str(REQUEUE_AFTER_SECONDS),
    }


# --- Presenting it ------------------------------------------------------------------------

COLUMNS = (
    "strategy",
    "ticks",
    "runs",
    "re-runs",
    "charges",
    "extra charges",
    "missed",
    "noticed",
    "stale writes accepted",
    "refused",
)


def result_cells(result: StrategyResult) -> list[str]:
    if result.skipped:
        return [result.label, f"skipped: {result.skipped}", *[""] * (len(COLUMNS) - 2)]
    noticed = "-" if result.noticed is None else ("yes" if result.noticed else "no")
    numbers = (result.ticks, result.executions, result.duplicate_executions, result.charges, result.duplicate_charges)
    return [result.label, *map(str, numbers), str(result.missed), noticed, *map(str, result.stale_counts)]


def result_line(result: StrategyResult) -> str:
    return ", ".join(f"{name} {cell}" for name, cell in zip(COLUMNS, result_cells(result), strict=True) if cell)


def markdown_table(results: list[StrategyResult]) -> list[str]:
    """The table as Markdown, its columns padded to line up (README quotes it as printed)."""
    rows = [list(COLUMNS), *(result_cells(result) for result in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]

    def line(cells: list[str]) -> str:
        padded = [
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return [line(rows[0]), rule, *(line(row) for row in rows[1:])]


def comparison_table(plan: StrategyPlan, results: list[StrategyResult]) -> list[str]:
    faults = plan.fault_lines() or ["no faults"]
    skew = f", clocks within +-{max(map(abs, plan.skews)):g} s" if any(plan.skews) else ""
    return [
        "",
        f"{plan.servers} servers{skew}, the probe once a minute from {plan.start:%Y-%m-%d %H:%M} UTC for "
        f"{plan.duration} at {plan.speed:g}x; faults: " + "; ".join(faults),
        "",
        *markdown_table(results),
        "",
        "runs: executions started; re-runs: executions of a tick already executed; extra charges: charges "
        "beyond one per tick; missed: ticks never charged; noticed: whether anything in the deployment can "
        "tell; stale writes: charges written after the writer's lock or lease had passed to another "
        "(refused: turned away by the fence)",
    ]


# --- The command line (manage.py simulate --strategy / --compare) -------------------------


def add_strategy_arguments(parser: Any) -> None:
    names = ", ".join(strategy.value for strategy in Strategy)
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], help="run the strategy probe under NAME")
    parser.add_argument(
        "--compare",
        nargs="?",
        const="all",
        metavar="NAMES",
        help=f"run strategies one after another on the same clock and faults, then one table: all (default; "
        f"the advisory lock and the claim also behind PgBouncer) or a comma list of {names}",
    )
    parser.add_argument(
        "--pooler",
        action="store_true",
        help="every process behind a private PgBouncer in transaction mode (with --strategy, --chaos or a plain run)",
    )
    parser.add_argument(
        "--pooler-connections",
        type=int,
        default=pgbouncer.POOL_SIZE,
        metavar="N",
        help=f"server connections that PgBouncer keeps (default {pgbouncer.POOL_SIZE}; 1: every process's "
        "transactions take turns on one PostgreSQL session)",
    )
    parser.add_argument(
        "--strategy-faults",
        default="all",
        metavar="LIST",
        help="with --strategy or --compare: all (default), none, or a comma list of long-run, pause, server-down",
    )


def strategy_requested(options: dict[str, Any]) -> bool:
    return bool(options["strategy"]) or options["compare"] is not None


def strategy_cases(options: dict[str, Any]) -> list[StrategyCase]:
    if options["strategy"]:
        if options["compare"] is not None:
            raise ValueError("give --strategy NAME or --compare, not both")
        return [StrategyCase(Strategy(options["strategy"]), pooled=options["pooler"])]
    if options["pooler"]:
        raise ValueError("--pooler goes with --strategy; --compare runs the pooled cases itself")
    if options["compare"] == "all":
        return list(COMPARE_CASES)
    words = [word.strip() for word in options["compare"].split(",") if word.strip()]
    unknown = [word for word in words if word not in {s.value for s in Strategy}]
    if unknown or not words:
        names = ", ".join(s.value for s in Strategy)
        raise ValueError(f"--compare {options['compare']!r}: give all, or a comma list of {names}")
    return [StrategyCase(Strategy(word)) for word in dict.fromkeys(words)]


def strategy_plan(
    *,
    servers: int,
    workers: int,
    start: datetime,
    duration: timedelta,
    speed: float,
    environment: dict[str, str],
    skews: tuple[float, ...],
    options: dict[str, Any],
) -> StrategyPlan:
    faults = StrategyFault.parse_list(options["strategy_faults"])
    if faults and duration < MIN_DURATION:
        raise ValueError(f"--duration {options['duration']}: the faults need at least {MIN_DURATION} simulated")
    return StrategyPlan(
        servers, workers, start, duration, speed, faults, environment, skews, options["pooler_connections"]
    )


def run_strategies(
    plan: StrategyPlan, cases: list[StrategyCase], *, log_dir: Path, say: Callable[[str], None]
) -> list[StrategyResult]:
    say(f"{len(cases)} deployment(s), each about {plan.duration.total_seconds() / plan.speed:.0f} s")
    for line in plan.fault_lines():
        say(f"  fault: {line}")
    results, boot = [], Boot()
    for case in cases:
        results.append(run_case(plan, case, log_dir=log_dir, boot=boot, say=say))
        say(f"  {result_line(results[-1])}")
    return results


def results_ok(results: list[StrategyResult], *, compare: bool) -> bool:
    """A single strategy must run each tick exactly once; a comparison needs the claim to."""
    judged = [r for r in results if not r.skipped and (not compare or r.label.startswith(Strategy.CLAIM))]
    return all(result.exactly_once for result in judged)
