"""Running a simulated deployment: servers, order traffic and injected faults.

Each server is what production runs on every machine, split in two processes so faults
can target either: ``manage.py worker --no-scheduler`` (the django-q2 cluster) and
``manage.py run_scheduler``. All share one accelerated clock; schedulers may be skewed.
Processes are started and stopped through ``support.processes``, the code the failure
scenarios use too.
"""

from __future__ import annotations

import heapq
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.db.models import Min, Q, QuerySet
from django.utils import timezone
from django_q.models import OrmQ

from outbox.selectors import outbox_due_count
from payouts.models import PAYOUT_JOB
from scheduling.models import DUE_STATUSES, IN_FLIGHT_STATUSES, LIVE_STATUSES, JobRun, JobRunEvent, RunStatus
from scheduling.selectors import scheduler_last_pass_at
from simulation.provider_process import RunningSandbox
from simulation.report import run_story
from statements.models import Statement
from support.processes import Fleet, Process, SimulatedTime, wait_for
from transfers.models import SEND_TRANSFERS_JOB, Transfer, TransferStatus

# The job whose run a crash or a pause is aimed at by default (it lasts three minutes of
# every ten); `simulate --fault-job` names another (the demo's: weekly-payouts).
TARGET_JOB = "sim-settlement"
# Real seconds the processes get to boot before the simulated clock reaches the start.
BOOT_SECONDS = 4.0
# Real seconds without a single claimed run finishing after which the drain gives up.
DRAIN_SECONDS = 60.0
# Real seconds: the shortest django-q2 task timeout a simulation gives its workers, and the
# margin its broker lock and the scheduler's requeue keep above a taken task's wait and run.
TASK_TIMEOUT_FLOOR = 30
TASK_MARGIN = 5
# The events of a woken worker's late word about a run taken from it.
LATE_WORD_KINDS = ("fail_rejected", "finish_rejected")
# Simulated time between the last order's deadline and the end: a few scheduler passes
# to hand its cancellation run to a worker.
SETTLE_MARGIN = timedelta(minutes=3)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """'90s', '45m', '3h', '2d' (simulated time)."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 90s, 45m, 3h or 2d")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


class FaultKind(StrEnum):
    CRASH_WORKER = "crash-worker"
    PAUSE_WORKER = "pause-worker"
    KILL_SCHEDULER = "kill-scheduler"
    KILL_SENDER = "kill-sender"


# Real seconds a request to the provider may take in a simulation (PAYMENT_PROVIDER_TIMEOUT_SECONDS
# of its processes): the production 30 s would be half an hour of the simulated clock at
# 60x, where a send-transfers run's 600 s timeout lasts ten real seconds.
SIMULATED_PROVIDER_TIMEOUT_SECONDS = 3.0
# Real milliseconds the provider takes over each transfer request while a sender kill waits
# for requests in flight (its `slow` fault): under the timeout, so they are answered.
SENDER_SLOW_MS = 1500
# The share of the run after which a sender kill that found no send in flight gives up, once no
# payout run is on its way and no transfer is pending (else it waits for them, until the end).
SENDER_KILL_BY = 0.8


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    at: timedelta  # into the simulation
    lasting: timedelta = timedelta(0)  # a crashed worker's restart delay, a pause's length

    @classmethod
    def parse(cls, kind: FaultKind, text: str, *, default_lasting: timedelta) -> Fault:
        """'40m' or '40m:8m' (at, then how long)."""
        at, _, lasting = text.partition(":")
        return cls(kind, parse_duration(at), parse_duration(lasting) if lasting else default_lasting)


@dataclass
class FaultRecord:
    """What an injected fault hit."""

    fault: Fault
    process: str
    at: datetime
    run_id: int | None = None
    fence: int | None = None
    note: str = ""

    def line(self) -> str:
        run = f"run {self.run_id} (fence {self.fence}) in flight" if self.run_id else "no run in flight"
        return f"{self.fault.kind} {self.process} at {self.at:%Y-%m-%d %H:%M:%S}: {run}{self.note}"

    def story(self) -> str:
        """What became of the run it hit, read back after the simulation."""
        return run_story(run_id=self.run_id) if self.run_id is not None else ""


class Recorded(Protocol):
    """A record of an injected fault, as the report prints it."""

    def line(self) -> str: ...

    def story(self) -> str: ...


@dataclass(frozen=True)
class SimulationPlan:
    servers: int
    workers: int
    start: datetime
    duration: timedelta
    speed: float
    skew: float = 0.0
    orders_per_minute: float = 0.0
    faults: tuple[Fault, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    fault_job: str = TARGET_JOB

    @property
    def end(self) -> datetime:
        return self.start + self.duration

    def traffic_window(self) -> timedelta:
        """How long orders are placed: until one answer window (plus a settling margin)
        before the end when the run is long enough, so every order's fate (answered, or
        cancelled by its run at the deadline) is decided by the simulated servers, not
        left to whatever serves the database next; else half the run."""
        settle = timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS) + SETTLE_MARGIN
        return max(self.duration - settle, self.duration / 2)

    def skews(self) -> list[float]:
        """Scheduler clock offsets spread evenly over [-skew, +skew]."""
        if self.servers == 1 or not self.skew:
            return [0.0] * self.servers
        step = 2 * self.skew / (self.servers - 1)
        return [-self.skew + i * step for i in range(self.servers)]


@dataclass
class SimulationOutcome:
    clock: SimulatedTime
    faults: Sequence[Recorded]
    crashed: list[str]
    drained: bool
    governor: Governor | None = None
    # Why the run did not settle (runs left in flight, a stop requested), "" when it did.
    unsettled: str = ""
    # Where the clock had got to when the run ended (its end, or where a stop cut it), and the real time then.
    ended_at: datetime | None = None
    ended_real: float | None = None
    # The exit status a stop asked for (SIGTERM: 143, Ctrl-C: 130), given once the report is printed.
    stopped_by: int | None = None

    def simulated_span(self, start: datetime) -> timedelta:
        return (self.ended_at or self.clock.now()) - start


# Real seconds between two looks of the governor at how far the system lags its clock.
GOVERN_EVERY = 1.0
# Simulated seconds: the oldest task waiting for a worker, or the oldest due run not yet
# handed over, lagging more than LAG_HIGH slows the clock by half (no more often than every
# SLOW_EVERY real seconds); under LAG_LOW for CALM_FOR real seconds speeds it up by half
# again, up to the speed asked for. SLOWEST: the slowest it goes (the speed asked for / 32).
LAG_HIGH = 120.0
LAG_LOW = 20.0
SLOW_EVERY = 4.0
CALM_FOR = 15.0
SLOWEST = 32.0
# Real seconds between a speed change being written and its taking effect: every process
# reads the clock file again before then.
CHANGE_LEAD = 1.0
# Real seconds the drain may take in all, beside DRAIN_SECONDS without progress.
DRAIN_LIMIT = 600.0


@dataclass
class Governor:
    """Holds the simulated clock to what the processes sustain: it reads how far they lag
    the clock (``lag``: the oldest task waiting in django-q2's queue table for a worker,
    in simulated seconds at the clock's speed, and the oldest due delayed run not yet
    handed over) and halves the clock's speed while the lag is over ``LAG_HIGH``, then
    raises it again while the lag stays low. It does nothing while no worker (or no
    scheduler) can work: a fault, not the machine, is holding them then."""

    asked: float
    speed: float
    began: float = field(default_factory=time.time)
    changes: list[tuple[datetime, float, float]] = field(default_factory=list)  # (simulated at, speed, lag)
    max_lag: float = 0.0
    looked_at: float = 0.0
    changed_at: float = 0.0
    calm_since: float | None = None

    @property
    def slowest(self) -> float:
        return self.asked / SLOWEST

    def decide(self, lag: float, *, now: float) -> float | None:
        """The new speed for a lag (simulated seconds) read at real time ``now``, or None."""
        self.max_lag = max(self.max_lag, lag)
        if lag > LAG_HIGH:
            self.calm_since = None
            if self.speed > self.slowest and now - self.changed_at >= SLOW_EVERY:
                return max(self.slowest, self.speed / 2)
            return None
        if lag >= LAG_LOW:
            self.calm_since = None
            return None
        self.calm_since = self.calm_since if self.calm_since is not None else now
        if self.speed < self.asked and now - self.calm_since >= CALM_FOR and now - self.changed_at >= CALM_FOR:
            self.calm_since = now
            return min(self.asked, self.speed * 1.5)
        return None

    def effective_speed(self, simulated: timedelta, *, ended: float | None = None) -> float:
        """Simulated seconds per real second from the clock's start to ``ended`` (0 for a
        run stopped before its clock started)."""
        real = (ended or time.time()) - self.began
        return max(0.0, simulated.total_seconds()) / real if real > 0 else 0.0

    def line(self, simulated: timedelta, *, ended: float | None = None) -> str:
        effective = self.effective_speed(simulated, ended=ended)
        if not self.changes:
            return (
                f"Clock: {self.asked:g}x held throughout (effective {effective:.0f}x from the start to the stop; "
                f"largest lag {self.max_lag:.0f} simulated s)"
            )
        slowest = min(speed for _, speed, _ in self.changes)
        steps = ", ".join(f"{at:%H:%M} {speed:.3g}x (lag {lag:.0f} s)" for at, speed, lag in self.changes[:8])
        more = f" and {len(self.changes) - 8} more" if len(self.changes) > 8 else ""
        return (
            f"Clock: asked {self.asked:g}x, the processes lagged it, slowed to {slowest:.3g}x at the slowest, "
            f"effective {effective:.0f}x (largest lag {self.max_lag:.0f} simulated s); changes: {steps}{more}"
        )

    def as_json(self, simulated: timedelta, *, ended: float | None = None) -> dict[str, Any]:
        return {
            "asked_speed": self.asked,
            "effective_speed": round(self.effective_speed(simulated, ended=ended), 1),
            "slowest_speed": min([self.asked, *(speed for _, speed, _ in self.changes)]),
            "max_lag_seconds": round(self.max_lag, 1),
            "changes": [
                {"at": at.isoformat(), "speed": speed, "lag": round(lag, 1)} for at, speed, lag in self.changes
            ],
        }


class Simulation:
    """Start the servers (and traffic), inject the faults on time, then stop everything:
    schedulers first, then the workers once the claimed runs have finished."""

    def __init__(
        self,
        plan: SimulationPlan,
        *,
        log_dir: Path,
        say: Callable[[str], None],
        provider: RunningSandbox | None = None,
    ) -> None:
        self.plan = plan
        self.say = say
        self.provider = provider  # the payment provider the processes send transfers to
        self.fleet = Fleet(environment=plan.environment, log_dir=log_dir)
        # The clock file: the governor slows (and speeds up) the clock of every process through it.
        self.clock = SimulatedTime.starting(
            plan.start, speed=plan.speed, lead=BOOT_SECONDS, file=log_dir / "clock.json"
        )
        self.governor = Governor(asked=plan.speed, speed=plan.speed, began=self.clock.anchor)
        self.ended: tuple[datetime, float] | None = None  # (simulated, real) when the clock reached the end
        self.records: list[Recorded] = []
        # (when, order, action): restarts and resumes that follow a fault.
        self.pending: list[tuple[datetime, int, Callable[[], None]]] = []

    def run(self) -> SimulationOutcome:
        """The run; stopped early (SIGTERM, Ctrl-C), it stops every process and still
        returns what it has, saying why it did not settle."""
        unsettled = ""
        drained = False
        stopped_by: int | None = None
        with self.fleet:
            try:
                self._start_servers()
                for at, inject in self._injections():
                    self._advance_to(at)
                    inject()
                self._advance_to(self.plan.end)
                drained, unsettled = self._stop()
            except (SystemExit, KeyboardInterrupt) as stop:
                self.ended = self.ended or (self.clock.now(), time.time())
                code = stop.code if isinstance(stop, SystemExit) else 130
                stopped_by = code if isinstance(code, int) else 1
                unsettled = (
                    f"stopped at {self.clock.now():%Y-%m-%d %H:%M:%S} (simulated) by "
                    f"{'Ctrl-C' if isinstance(stop, KeyboardInterrupt) else f'exit {stop.code}'}; "
                    f"{_in_flight()}"
                )
                self.say(unsettled)
        self.ended = self.ended or (self.clock.now(), time.time())
        crashed = [process.name for process in self.fleet.crashed()]
        return SimulationOutcome(
            clock=self.clock,
            faults=self.records,
            crashed=crashed,
            drained=drained,
            governor=self.governor,
            unsettled=unsettled,
            ended_at=self.ended[0],
            ended_real=self.ended[1],
            stopped_by=stopped_by,
        )

    def _injections(self) -> Iterator[tuple[datetime, Callable[[], None]]]:
        """(when, inject) for every fault, in order."""
        for fault in sorted(self.plan.faults, key=lambda f: f.at):
            yield self.plan.start + fault.at, partial(self._inject, fault)

    def _start_servers(self) -> None:
        for number, skew in enumerate(self.plan.skews(), start=1):
            self._start_server(number, skew=skew)
        self._start_traffic()

    def _start_traffic(self) -> None:
        if self.plan.orders_per_minute > 0:
            # An instant, not a number of minutes from whenever the process gets going: on a
            # loaded machine it starts minutes of simulated time late, and its last orders'
            # deadlines would fall after the end, their runs left for `make up` to settle.
            until = (self.plan.start + self.plan.traffic_window()).isoformat()
            command = ["simulate_orders", "--per-minute", str(self.plan.orders_per_minute), "--until", until]
            self.fleet.start("orders", command, env=self._env(), may_finish=True)
        self.say(
            f"started {self.plan.servers} servers (a scheduler and a worker with {self.plan.workers} "
            f"django-q2 workers each){' and order traffic' if self.plan.orders_per_minute else ''}; "
            f"clock {self.plan.start:%Y-%m-%d %H:%M} UTC at {self.plan.speed:g}x"
        )

    def _start_server(self, number: int, *, skew: float, worker_skew: float = 0.0) -> None:
        self.fleet.start(f"worker-{number}", ["worker", "--no-scheduler"], env=self._env(skew=worker_skew))
        self.fleet.start(f"scheduler-{number}", ["run_scheduler"], env=self._env(skew=skew))

    def _env(self, *, skew: float = 0.0) -> dict[str, str]:
        return {**self.clock.environment(skew=skew), "Q_WORKERS": str(self.plan.workers), **self._q_timing()}

    def _q_timing(self) -> dict[str, str]:
        """django-q2's task timeout and broker lock are real seconds: the timeout is scaled
        to the clock (a task a crashed or paused cluster had taken comes back in simulated
        time, not after 31 real minutes) with a floor of ``TASK_TIMEOUT_FLOOR`` real
        seconds (at 120x the scaled 15 s killed check-missed-runs on a loaded machine).
        A cluster takes one task ahead of its free workers (``queue_limit`` 1, plus the one
        its pusher holds), so a taken task waits at most one task's length before it runs:
        the lock (``retry``) outlasts that wait and its run, and the scheduler requeues a
        run left ``enqueued`` only after the same real wait (in simulated seconds at the
        clock's speed; a slowed clock makes it longer in real time, never shorter). A task
        still waiting for a worker is not delivered again."""
        q_cluster: dict[str, Any] = settings.Q_CLUSTER
        timeout = max(TASK_TIMEOUT_FLOOR, round(q_cluster["timeout"] / self.plan.speed))
        retry = 2 * timeout + TASK_MARGIN
        requeue = max(settings.SCHEDULER_REQUEUE_AFTER_SECONDS, round((timeout + TASK_MARGIN) * self.plan.speed))
        return {
            "Q_TIMEOUT_SECONDS": str(timeout),
            "Q_RETRY_SECONDS": str(retry),
            "Q_QUEUE_LIMIT": "1",
            "SCHEDULER_REQUEUE_AFTER_SECONDS": str(requeue),
        }

    def _advance_to(self, instant: datetime) -> None:
        """Sleep until ``instant`` (simulated), carrying out restarts and resumes on the way."""
        while self.pending and self.pending[0][0] <= instant:
            when, _, action = heapq.heappop(self.pending)
            self._sleep_until(when)
            action()
        self._sleep_until(instant)

    def _sleep_until(self, instant: datetime) -> None:
        """Sleep until the clock shows ``instant``, the governor looking on the way."""
        while (left := self.clock.real_time_at(instant) - time.time()) > 0:
            time.sleep(min(left, GOVERN_EVERY))
            self._govern()

    def _govern(self) -> None:
        """Every GOVERN_EVERY real seconds: read the lag, and change the clock's speed if
        the governor says so (see ``Governor``)."""
        now = time.time()
        if now - self.governor.looked_at < GOVERN_EVERY:
            return
        self.governor.looked_at = now
        lag = self._lag()
        if lag is None:
            return
        speed = self.governor.decide(lag, now=now)
        if speed is None or speed == self.governor.speed:
            return
        slower = "slowed" if speed < self.governor.speed else "sped up"
        self.clock = self.clock.at_speed(speed, lead=CHANGE_LEAD)
        self.governor.speed = speed
        self.governor.changed_at = now
        at = self.clock.later[-1].start
        self.governor.changes.append((at, speed, lag))
        self.say(f"clock {slower} to {speed:.3g}x at {at:%Y-%m-%d %H:%M:%S}: the processes lagged it by {lag:.0f} s")

    def _lag(self) -> float | None:
        """How far the processes lag the clock, in simulated seconds: the oldest task
        waiting in django-q2's queue table for a worker, and the oldest delayed run due
        but not yet handed over; None while no worker or no scheduler is up to work
        (every one killed or paused: a fault holds the system, not the machine)."""
        working = [p for p in self.fleet.processes.values() if p.alive() and "SIGSTOP" not in p.signals[-1:]]
        if not any(p.name.startswith("worker-") for p in working) or not any(
            p.name.startswith("scheduler-") for p in working
        ):
            return None
        close_old_connections()
        speed = self.clock.current_speed()
        now = self.clock.now()
        real_now = timezone.now()  # django-q2 stamps its queue with the real clock
        oldest = OrmQ.objects.filter(lock__lte=real_now).aggregate(oldest=Min("lock"))["oldest"]
        queue_lag = (real_now - oldest).total_seconds() * speed if oldest else 0.0
        due = JobRun.objects.filter(status=RunStatus.SCHEDULED, due_at__lte=now).aggregate(oldest=Min("due_at"))
        due_lag = (now - due["oldest"]).total_seconds() if due["oldest"] else 0.0
        return max(queue_lag, due_lag, 0.0)

    def _later(self, delay: timedelta, action: Callable[[], None]) -> None:
        heapq.heappush(self.pending, (self.clock.now() + delay, len(self.pending) + len(self.records), action))

    def _inject(self, fault: Fault) -> None:
        if fault.kind == FaultKind.KILL_SENDER:
            self._record(self._kill_sender(fault))
            return
        if fault.kind == FaultKind.KILL_SCHEDULER:
            victim = self.fleet["scheduler-1"]
            victim.send(signal.SIGKILL)
            self._record(FaultRecord(fault, victim.name, self.clock.now(), note="; not restarted"))
            return
        run = self._target_run()
        owner = self.fleet.owner_of(_pid(run.worker)) if run else None
        victim = owner or self.fleet["worker-1"]
        record = FaultRecord(fault, victim.name, self.clock.now(), run.id if run else None, run.fence if run else None)
        if fault.kind == FaultKind.CRASH_WORKER:
            victim.send(signal.SIGKILL)
            record.note = f"; SIGKILL, restarted {fault.lasting} later"
            self._later(fault.lasting, lambda: self._restart(victim))
        else:
            victim.send(signal.SIGSTOP)
            held = run if owner else None  # the run the paused process holds
            until = " and until its run was taken from it" if held else ""
            record.note = f"; SIGSTOP for {fault.lasting}{until}, then SIGCONT"
            self._later(fault.lasting, lambda: self._resume(victim, held))
        self._record(record)

    def _kill_sender(self, fault: Fault) -> FaultRecord:
        """SIGKILL the worker of a send-transfers run mid-batch: the provider takes
        SENDER_SLOW_MS over each transfer request (its ``slow`` fault), and once requests
        are in flight the worker is killed. The provider commits them after the sender
        died; the ledger still says pending, and the next run sends the same keys."""
        now = self.clock.now()
        if self.provider is None:
            return FaultRecord(fault, "-", now, note="; not injected: the run has no provider")
        sandbox = self.provider
        sandbox.arm_fault("slow", delay_ms=SENDER_SLOW_MS, methods=("POST",))
        try:
            found: list[tuple[JobRun, Process]] = []

            def sending() -> bool:
                if not sandbox.state()["in_flight"]:
                    return False
                close_old_connections()
                for run in JobRun.objects.filter(job_name=SEND_TRANSFERS_JOB, status=RunStatus.RUNNING):
                    owner = self.fleet.owner_of(_pid(run.worker))
                    if owner is not None and owner.alive():
                        found.append((run, owner))
                        return True
                return False

            by = self.plan.start + self.plan.duration * SENDER_KILL_BY

            def sending_or_none_coming() -> bool:
                if sending():
                    return True
                return self.clock.now() >= by and not self._transfers_coming()

            self._wait(sending_or_none_coming, until=self.plan.end, real_limit=float("inf"))
            if not found:
                return FaultRecord(
                    fault, "-", self.clock.now(), note=f"; not injected: no transfer sent by {self.clock.now():%H:%M}"
                )
            run, victim = found[0]
            recorded = Transfer.objects.filter(status=TransferStatus.SENT).count()
            victim.send(signal.SIGKILL)
            wait_for(lambda: not victim.alive(), timeout=10, what="the sender's worker dying")
            wait_for(lambda: not sandbox.state()["in_flight"], timeout=30, what="the provider finishing the requests")
        finally:
            sandbox.clear_fault()
        held = sandbox.state()["transfers"]
        note = (
            f"; SIGKILL mid-batch, restarted {fault.lasting} later: {recorded} transfers recorded sent, the provider "
            f"then held {held} ({held - recorded} committed there and not recorded here)"
        )
        self._later(fault.lasting, lambda: self._restart(victim))
        return FaultRecord(fault, victim.name, self.clock.now(), run.id, run.fence, note=note)

    def _transfers_coming(self) -> bool:
        """Whether a send may still come: a weekly-payouts run on its way (it writes the
        transfers) or a transfer pending (due now or after its backoff)."""
        close_old_connections()
        return (
            JobRun.objects.filter(job_name=PAYOUT_JOB, status__in=IN_FLIGHT_STATUSES).exists()
            or Transfer.objects.filter(status=TransferStatus.PENDING).exists()
        )

    def _wait(self, condition: Callable[[], bool], *, until: datetime, real_limit: float) -> bool:
        """Poll ``condition`` until it holds (True), or the clock shows ``until`` or
        ``real_limit`` real seconds passed (False), carrying out the restarts and resumes
        that fall due meanwhile: a wait must not keep a killed process down longer."""
        limit = time.time() + real_limit
        while time.time() < min(limit, self.clock.real_time_at(until)):
            if condition():
                return True
            self._carry_out_due()
            time.sleep(0.05)
        return condition()

    def _target_run(self) -> JobRun | None:
        """A running run of the plan's fault job, else any running run, else None.

        It waits up to ten simulated minutes for a run of the fault job to appear, and once
        one is on its way (claimed, due or enqueued), until it runs, however long a loaded
        machine takes (at most until the end): the wait follows the run, not a number of
        seconds. With a fixed wait, a CI run at high load gave up while the payout's task
        sat taken in a busy cluster, crashed that cluster through another of its runs, and
        the payout came back only after the simulation's end."""
        appear_by = self.clock.now() + timedelta(minutes=10)
        of_the_job = JobRun.objects.filter(job_name=self.plan.fault_job)

        def running_or_none_coming() -> bool:
            close_old_connections()
            if of_the_job.filter(status=RunStatus.RUNNING).exists():
                return True
            return self.clock.now() >= appear_by and not of_the_job.filter(status__in=IN_FLIGHT_STATUSES).exists()

        self._wait(running_or_none_coming, until=self.plan.end, real_limit=float("inf"))
        run = of_the_job.filter(status=RunStatus.RUNNING).order_by("started_at").first()
        return run or JobRun.objects.filter(status=RunStatus.RUNNING).order_by("started_at").first()

    def _record(self, record: Recorded) -> None:
        self.records.append(record)
        self.say(record.line())

    def _restart(self, process: Process) -> None:
        self.fleet.restart(process.name)
        self.say(f"restarted {process.name} at {self.clock.now():%Y-%m-%d %H:%M:%S}")

    def _resume(self, process: Process, run: JobRun | None = None) -> None:
        """SIGCONT ``process``. With ``run`` (the run the paused process holds), the fault
        is a worker that wakes after its run moved on: the pause outlasts the run's
        timeout, but how soon a scheduler pass sees the stale heartbeat depends on the
        machine, so it wakes only once a scheduler took its run (abandoned it), and the
        simulation goes on once its late word was written (refused by the fence or the
        finish). Either wait ends at the simulation's end, carrying out the restarts due
        meanwhile."""
        taken = False
        if run is not None:
            held = JobRun.objects.filter(id=run.id, fence=run.fence, status=RunStatus.RUNNING)
            taken = self._wait(lambda: _count_fresh(held) == 0, until=self.plan.end, real_limit=float("inf"))
        process.send(signal.SIGCONT)
        self.say(f"resumed {process.name} at {self.clock.now():%Y-%m-%d %H:%M:%S}")
        if run is not None and taken:
            late = JobRunEvent.objects.filter(run_id=run.id, fence=run.fence, kind__in=LATE_WORD_KINDS)
            self._wait(lambda: _count_fresh(late) > 0, until=self.plan.end, real_limit=float("inf"))

    def _stop(self) -> tuple[bool, str]:
        """Stop the traffic at the end; let the servers settle (see ``_settle``); then stop
        the schedulers, let the workers finish what was claimed (bounded), and stop them.
        Returns whether it settled and everything claimed finished, and if not, why: which
        runs were left, and how long the drain waited."""
        self._advance_to(self.plan.end)  # restarts and resumes due by the end
        for process in self.fleet.named("worker-"):
            if process.alive() and "SIGSTOP" in process.signals:
                process.send(signal.SIGCONT)
        self.ended = (self.clock.now(), time.time())
        self.fleet.stop(self.fleet.named("orders"))
        settled_left = self._settle(self.plan.end)
        settled = not settled_left
        self.fleet.stop(self.fleet.named("scheduler-"))
        began = time.monotonic()
        drained = _drain(lambda: _count_fresh(JobRun.objects.filter(status__in=LIVE_STATUSES)), patience=DRAIN_SECONDS)
        waited = time.monotonic() - began
        problems = [] if settled else [f"the window's runs and sends did not settle after its end: {settled_left}"]
        problems += [] if drained else [f"the drain gave up after {waited:.0f} real s: {_in_flight()}"]
        unsettled = "; ".join(problems)
        self.fleet.stop(self.fleet.named("worker-"))
        self.say(f"stopped at {self.clock.now():%Y-%m-%d %H:%M:%S} (simulated)")
        if unsettled:
            self.say(unsettled)
        return drained and settled, unsettled

    def _settle(self, end: datetime) -> str:
        """After the end the servers go on as they would, schedulers and workers, with no
        more traffic or faults, until a scheduler pass has looked at the end (so the
        window's last ticks are claimed), every run of a tick of the window has finished,
        and nothing it wrote waits to be sent (a transfer or statement due by now). What a
        crash took (a task a killed cluster had taken comes back when django-q2's lock on
        it expires) is then judged by its outcome, not cut off by the end. The report
        still counts the window's ticks only. Waits for as long as that keeps moving, and
        at least the broker's lock, so a lost task has time to come back. Returns "" once
        it settled, else what was left: the window's runs, the sends due, the pass missing."""
        window = JobRun.objects.filter(scheduled_for__lte=end).filter(
            Q(status__in=LIVE_STATUSES) | Q(status__in=DUE_STATUSES, due_at__lte=end)
        )

        def left() -> int:
            close_old_connections()
            passed = scheduler_last_pass_at()  # a pass at or after the end claimed every tick of the window
            now = self.clock.now()
            due = outbox_due_count(Transfer, now=now) + outbox_due_count(Statement, now=now)
            return window.count() + due + (passed is None or passed < end)

        lock = float(self._q_timing()["Q_RETRY_SECONDS"]) + TASK_MARGIN
        if _drain(left, patience=max(DRAIN_SECONDS, lock), tick=self._carry_out_due):
            if self.clock.now() > end:
                self.say(f"settled at {self.clock.now():%Y-%m-%d %H:%M:%S}: the window's runs and sends finished")
            return ""
        return _unsettled(window, end=end, now=self.clock.now())

    def _carry_out_due(self) -> None:
        """The restarts and resumes falling due, then the governor: on every look of a wait."""
        while self.pending and self.pending[0][0] <= self.clock.now():
            _, _, action = heapq.heappop(self.pending)
            action()
        self._govern()


def _drain(left: Callable[[], int], *, patience: float, tick: Callable[[], None] | None = None) -> bool:
    """Wait until ``left()`` is 0, for as long as it keeps falling: a loaded machine works
    off its backlog slowly, not never. False once it did not fall for ``patience`` real
    seconds, or after DRAIN_LIMIT in all: the report is printed either way. ``tick`` is
    called on every look (the governor, while the clock still runs)."""
    count, began = left(), time.monotonic()
    progress_at = began
    while count:
        time.sleep(0.2)
        if tick is not None:
            tick()
        now_left = left()
        if now_left < count:
            progress_at = time.monotonic()
        elif time.monotonic() - progress_at > patience:
            return False
        if time.monotonic() - began > DRAIN_LIMIT:
            return False
        count = now_left
    return True


def _unsettled(window: QuerySet[JobRun], *, end: datetime, now: datetime) -> str:
    """What kept a settle from ending: the window's runs left (due or in flight, by job and
    status, with a few ids), the transfers and statements due unsent at ``now``, and the
    scheduler pass at or after ``end`` if none was made."""
    try:
        close_old_connections()
        runs = list(window.order_by("id").values_list("id", "job_name", "status"))
        sends = {"transfers": outbox_due_count(Transfer, now=now), "statements": outbox_due_count(Statement, now=now)}
        passed = scheduler_last_pass_at()
        tasks = OrmQ.objects.count()
    except DatabaseError as error:
        return f"the database could not say what was left ({error})"
    parts = [f"{len(runs)} runs of the window left ({_runs_told(runs)})"] if runs else []
    parts += [f"{n} {what} due unsent" for what, n in sends.items() if n]
    if passed is None or passed < end:
        last = f"the last at {passed:%Y-%m-%d %H:%M:%S}" if passed else "none at all"
        parts.append(f"no scheduler pass at or after the end ({last})")
    return "; ".join([*parts, f"{tasks} tasks in django-q2's queue"])


def _in_flight() -> str:
    """The runs not settled, by job and status, with a few ids, and django-q2's queue."""
    try:
        close_old_connections()
        runs = list(
            JobRun.objects.filter(status__in=LIVE_STATUSES).order_by("id").values_list("id", "job_name", "status")
        )
        tasks = OrmQ.objects.count()
    except DatabaseError as error:
        return f"the database could not say what was in flight ({error})"
    if not runs:
        return f"no run in flight; {tasks} tasks in django-q2's queue"
    return f"{len(runs)} runs in flight ({_runs_told(runs)}); {tasks} tasks in django-q2's queue"


def _runs_told(runs: list[tuple[int, str, str]]) -> str:
    """(id, job, status) rows, by job and status, with the first few ids."""
    counts = Counter((job, status) for _, job, status in runs)
    by_job = ", ".join(f"{n} {job} {status}" for (job, status), n in counts.most_common(6))
    return f"{by_job}; first ids {', '.join(str(run_id) for run_id, _, _ in runs[:10])}"


def _count_fresh(queryset: QuerySet[Any]) -> int:
    close_old_connections()
    return queryset.count()


def _pid(worker: str) -> int:
    return int(worker.rsplit(":", 1)[-1]) if worker else -1
