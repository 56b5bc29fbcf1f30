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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.db import close_old_connections
from django.db.models import QuerySet

from scheduling.models import LIVE_STATUSES, JobRun, RunStatus
from simulation.provider_process import RunningSandbox
from simulation.report import run_story
from support.processes import Fleet, Process, SimulatedTime, wait_for
from transfers.models import SEND_TRANSFERS_JOB, Transfer, TransferStatus

# The job whose run a crash or a pause is aimed at by default (it lasts three minutes of
# every ten); `simulate --fault-job` names another (the demo's: weekly-payouts).
TARGET_JOB = "sim-settlement"
# Real seconds the processes get to boot before the simulated clock reaches the start.
BOOT_SECONDS = 4.0
# Real seconds without a single claimed run finishing after which the drain gives up.
DRAIN_SECONDS = 60.0
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
# The share of the run after which a sender kill that found no send in flight gives up.
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
        self.clock = SimulatedTime.starting(plan.start, speed=plan.speed, lead=BOOT_SECONDS)
        self.fleet = Fleet(environment=plan.environment, log_dir=log_dir)
        self.records: list[Recorded] = []
        # (when, order, action): restarts and resumes that follow a fault.
        self.pending: list[tuple[datetime, int, Callable[[], None]]] = []

    def run(self) -> SimulationOutcome:
        with self.fleet:
            self._start_servers()
            for at, inject in self._injections():
                self._advance_to(at)
                inject()
            self._advance_to(self.plan.end)
            drained = self._stop()
        crashed = [process.name for process in self.fleet.crashed()]
        return SimulationOutcome(clock=self.clock, faults=self.records, crashed=crashed, drained=drained)

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
            minutes = str(self.plan.traffic_window().total_seconds() / 60)
            command = ["simulate_orders", "--per-minute", str(self.plan.orders_per_minute), "--minutes", minutes]
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
        """django-q2's task timeout and broker lock are real seconds: scaled to the clock, a
        task a crashed or paused cluster had taken is handed out again after the production
        delay in simulated time (unscaled, after 31 real minutes: never, in a simulation)."""
        q_cluster: dict[str, Any] = settings.Q_CLUSTER
        timeout = max(1, round(q_cluster["timeout"] / self.plan.speed))
        retry = max(timeout + 1, round(q_cluster["retry"] / self.plan.speed))
        return {"Q_TIMEOUT_SECONDS": str(timeout), "Q_RETRY_SECONDS": str(retry)}

    def _advance_to(self, instant: datetime) -> None:
        """Sleep until ``instant`` (simulated), carrying out restarts and resumes on the way."""
        while self.pending and self.pending[0][0] <= instant:
            when, _, action = heapq.heappop(self.pending)
            self.clock.sleep_until(when)
            action()
        self.clock.sleep_until(instant)

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
        victim = (self.fleet.owner_of(_pid(run.worker)) if run else None) or self.fleet["worker-1"]
        record = FaultRecord(fault, victim.name, self.clock.now(), run.id if run else None, run.fence if run else None)
        if fault.kind == FaultKind.CRASH_WORKER:
            victim.send(signal.SIGKILL)
            record.note = f"; SIGKILL, restarted {fault.lasting} later"
            self._later(fault.lasting, lambda: self._restart(victim))
        else:
            victim.send(signal.SIGSTOP)
            record.note = f"; SIGSTOP for {fault.lasting}, then SIGCONT"
            self._later(fault.lasting, lambda: self._resume(victim))
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
            if not self._wait(sending, until=by, real_limit=self.clock.real_seconds((by - now).total_seconds())):
                return FaultRecord(fault, "-", self.clock.now(), note=f"; not injected: no transfer sent by {by:%H:%M}")
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

    def _wait(self, condition: Callable[[], bool], *, until: datetime, real_limit: float) -> bool:
        """Poll ``condition`` until it holds (True), or the clock shows ``until`` or
        ``real_limit`` real seconds passed (False), carrying out the restarts and resumes
        that fall due meanwhile: a wait must not keep a killed process down longer."""
        deadline = min(time.time() + real_limit, self.clock.real_time_at(until))
        while time.time() < deadline:
            if condition():
                return True
            while self.pending and self.pending[0][0] <= self.clock.now():
                _, _, action = heapq.heappop(self.pending)
                action()
            time.sleep(0.05)
        return condition()

    def _target_run(self) -> JobRun | None:
        """A running run of the plan's fault job (waiting up to ten simulated minutes for
        one), else any running run, else None."""
        deadline = time.monotonic() + self.clock.real_seconds(600)
        while time.monotonic() < deadline:
            close_old_connections()
            running = JobRun.objects.filter(job_name=self.plan.fault_job, status=RunStatus.RUNNING)
            run = running.order_by("started_at").first()
            if run is not None:
                return run
            time.sleep(0.05)
        return JobRun.objects.filter(status=RunStatus.RUNNING).order_by("started_at").first()

    def _record(self, record: Recorded) -> None:
        self.records.append(record)
        self.say(record.line())

    def _restart(self, process: Process) -> None:
        self.fleet.restart(process.name)
        self.say(f"restarted {process.name} at {self.clock.now():%Y-%m-%d %H:%M:%S}")

    def _resume(self, process: Process) -> None:
        process.send(signal.SIGCONT)
        self.say(f"resumed {process.name} at {self.clock.now():%Y-%m-%d %H:%M:%S}")

    def _stop(self) -> bool:
        """Stop the schedulers and the traffic, let the workers finish what was claimed
        (bounded), then stop them. Returns whether everything claimed finished."""
        self._advance_to(self.plan.end)  # restarts and resumes due by the end
        for process in self.fleet.named("worker-"):
            if process.alive() and "SIGSTOP" in process.signals:
                process.send(signal.SIGCONT)
        self.fleet.stop([*self.fleet.named("scheduler-"), *self.fleet.named("orders")])
        drained = _drain(JobRun.objects.filter(status__in=LIVE_STATUSES))
        self.fleet.stop(self.fleet.named("worker-"))
        self.say(f"stopped at {self.clock.now():%Y-%m-%d %H:%M:%S} (simulated)")
        return drained


def _drain(live: QuerySet[JobRun]) -> bool:
    """Wait for the claimed runs to finish for as long as they keep finishing: a loaded
    machine works off its backlog slowly, not never. False once none finished for
    DRAIN_SECONDS (no scheduler is left to claim more, so the count only falls)."""
    left, progress_at = _count_fresh(live), time.monotonic()
    while left:
        time.sleep(0.2)
        now_left = _count_fresh(live)
        if now_left < left:
            progress_at = time.monotonic()
        elif time.monotonic() - progress_at > DRAIN_SECONDS:
            return False
        left = now_left
    return True


def _count_fresh(queryset: QuerySet[JobRun]) -> int:
    close_old_connections()
    return queryset.count()


def _pid(worker: str) -> int:
    return int(worker.rsplit(":", 1)[-1]) if worker else -1
