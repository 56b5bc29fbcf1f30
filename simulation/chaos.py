"""Chaos with a seed: a fault schedule drawn from ``random.Random(seed)`` and injected into
a simulated deployment (``manage.py simulate --chaos SEED``).

1. Draw (``chaos_schedule``, no database, no processes): each server's clock offset,
   then ``rate`` faults per simulated hour at random instants of the active window (the
   first 5 % of the run, at most nine minutes, and its last 25 % are quiet, so the servers
   have booted and every fault has recovered before the report reads the database): an
   eleventh of them of every drawn kind (at least one each), the rest weighted, and the
   payout kill at the payout tick (after it at most COMMITS_AFTER_PAYOUT commit faults, the
   others drawn again as other kinds). Targets are servers that exist at that moment (servers
   join and leave as the schedule goes). The same seed, start, duration, server count and
   rate give the same schedule, printed at the start.
2. Inject (``ChaosSimulation``): each fault at its instant, aimed at what is in flight
   (the worker running a settlement, waited for until the next fault is due; the worker
   pinned inside the payout write). What a fault hit depends on timing; the schedule
   does not. Behind a pooler (``simulate --chaos SEED --pooler``) every server process
   and the order traffic reach the database through a private PgBouncer in transaction
   mode; the injector's own connections go to PostgreSQL directly.
3. Recover: each record says, after the run, what became of what it hit (the run's
   story, the claims other schedulers made while one was down, the reconnections).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Max, Min, QuerySet

from payouts.models import PAYOUT_JOB
from scheduling import cron, queries
from scheduling.models import JobRun, JobRunEvent, RunStatus, Trigger
from scheduling.sql import FENCE_COUNTER_BITS
from simulation.probe_jobs import SETTLEMENT_TIMEOUT_SECONDS
from simulation.provider_process import RunningSandbox
from simulation.report import provider_client_for, run_story
from simulation.runner import (
    SENDER_SLOW_MS,
    SIMULATED_PROVIDER_TIMEOUT_SECONDS,
    TARGET_JOB,
    Simulation,
    SimulationOutcome,
    SimulationPlan,
    _pid,
)
from support.pgbouncer import Pooled
from support.processes import Process, wait_for
from transfers import provider
from transfers.models import SEND_FENCE_RESOURCE, SEND_TRANSFERS_JOB, Transfer, TransferStatus

MAX_SKEW_SECONDS = 90.0
# Faults per simulated hour (beside the payout and sender kills), an eleventh of them of each
# of the ten drawn kinds: an hour gets one of each and six more.
DEFAULT_RATE = 16.0
MAX_RATE = 120.0  # one every 30 simulated seconds
# The share of the run before the first and after the last fault. The quiet start lets the
# servers boot, which takes the same time in a long run as in a short one: it lasts at most
# QUIET_START_LONGEST, so the 20:30 payout tick of a run from 20:00 is inside the active
# window of a twelve-hour run too (5 % of twelve hours, 36 minutes, left it out: no payout
# kill, no sender kill, and the provider's commit faults met no transfer).
QUIET_START, QUIET_END = 0.05, 0.25
QUIET_START_LONGEST = timedelta(minutes=9)
# Real seconds the injector waits at most for the payout run to block on its pinned write
# or to finish (with nothing to write): only a guard against hanging, since while the pin
# is held the run can do nothing else. It waits no later than the quiet end in any case
# (with every scheduler down at once, nothing claims the payout tick meanwhile).
PIN_WAIT_SECONDS = 120.0
NOT_INJECTED = "not injected"
EVERY_WORKER_SPENT = "every live worker is killed, gone, or runs a run an earlier fault landed in"
PAYOUT_CRON = "30 20 * * 0"  # payouts/jobs.py: the tick a mid-payout kill is aimed at
# Simulated seconds db-terminate tries again while the process has no connection to
# terminate (behind PgBouncer a process has a server connection only inside a transaction).
TERMINATE_WINDOW_SECONDS = 60.0
# Simulated seconds a kill or a pause waits for a settlement to be in flight (one runs
# three minutes of every ten, later on a loaded machine); a fault the wait pushes into
# the run's quiet end is not injected.
TARGET_WAIT_SECONDS = 600.0


class ChaosKind(StrEnum):
    WORKER_KILL = "worker-kill"
    PAYOUT_KILL = "worker-kill-mid-payout"
    WORKER_PAUSE = "worker-pause"
    SCHEDULER_KILL = "scheduler-kill"
    DB_TERMINATE = "db-terminate"
    CLOCK_SKEW = "clock-skew"
    SERVER_JOIN = "server-join"
    SERVER_LEAVE = "server-leave"
    PROVIDER_COMMIT_TIMEOUT = "provider-commit-then-timeout"
    PROVIDER_COMMIT_500 = "provider-commit-then-500"
    PROVIDER_DOWN = "provider-down"
    SENDER_KILL = "sender-kill-before-local-commit"
    LEADER_KILL = "leader-kill"


# Every run draws these; leader kills only when asked (``leader_kills``: a cluster is on).
ALWAYS_DRAWN = tuple(kind for kind in ChaosKind if kind != ChaosKind.LEADER_KILL)


# The provider's faults: drawn after the payout tick, when there are transfers to send.
_PROVIDER_KINDS = (ChaosKind.PROVIDER_COMMIT_TIMEOUT, ChaosKind.PROVIDER_COMMIT_500, ChaosKind.PROVIDER_DOWN)
# The commit faults are armed one after another right after the payout kill, in turn at the
# provider (each acts once the one before it has hit its requests), so they meet the payout's
# transfers when its retry first sends them; the sender kill and provider-down come after.
_COMMIT_KINDS = (ChaosKind.PROVIDER_COMMIT_TIMEOUT, ChaosKind.PROVIDER_COMMIT_500)
# At most this many of them (the most an hour's run drew, seeds 1 to 100): every failed
# transfer is sent again after a backoff that doubles, so the payout's transfers spend the
# requests of a few commit faults in minutes, but the 38 that seed 7319's twelve-hour run
# drew (68 requests) took hours, and the sender kill behind them found every transfer sent.
# The commit faults a run draws beyond them are drawn again as other kinds, by their
# weights, so the run keeps its fault rate.
COMMITS_AFTER_PAYOUT = 5
# The provider's faults recover in minutes (a retry with the same key): their quiet end is
# the last 15 % of the run, not 25 %.
PROVIDER_QUIET_END = 0.15
# Simulated time from the payout kill to its run's retry writing the payouts and their
# transfers: the payout job's 600 s timeout abandons it, and a worker takes the retry.
PAYOUT_RETRIED = timedelta(minutes=12)
# Simulated time between two looks at the commit faults armed at the provider.
COMMIT_WATCH = timedelta(seconds=5)
# Real milliseconds a commit-then-timeout holds the connection: past the request's timeout.
COMMIT_TIMEOUT_HOLD_MS = round(SIMULATED_PROVIDER_TIMEOUT_SECONDS * 2000)


# Real seconds a leader kill waits for a writable primary on a new timeline (Patroni's loop
# is 10 s, its TTL 30 s; a loaded machine adds to both).
LEADER_WAIT_SECONDS = 180.0
# The newest event (its id): what a promotion's story counts from.
_LAST_EVENT = "SELECT coalesce(max(id), 0) FROM job_run_events"


# Injected even when the injector reaches them only in the quiet end: nothing to recover.
_NOTHING_TO_RECOVER = (ChaosKind.SERVER_JOIN, ChaosKind.CLOCK_SKEW)


# How often each kind is drawn beyond its eleventh (the payout and sender kills need the payout tick).
_WEIGHTS = {
    ChaosKind.WORKER_KILL: 3,
    ChaosKind.WORKER_PAUSE: 3,
    ChaosKind.SCHEDULER_KILL: 2,
    ChaosKind.DB_TERMINATE: 3,
    ChaosKind.CLOCK_SKEW: 2,
    ChaosKind.SERVER_JOIN: 1,
    ChaosKind.SERVER_LEAVE: 1,
    ChaosKind.PROVIDER_COMMIT_TIMEOUT: 1,
    ChaosKind.PROVIDER_COMMIT_500: 1,
    ChaosKind.PROVIDER_DOWN: 1,
}


@dataclass(frozen=True)
class ChaosFault:
    kind: ChaosKind
    at: timedelta  # into the run
    server: int  # the server aimed at (a joining server's new number)
    lasting: timedelta = timedelta(0)  # until the restart or the SIGCONT
    skew: float = 0.0  # clock-skew and server-join: the server's clock offset, seconds
    process: str = ""  # db-terminate: whose connections
    requests: int = 0  # provider-commit-*: how many transfer requests it hits

    def line(self) -> str:
        at = _hms(self.at)
        what = {
            ChaosKind.WORKER_KILL: f"SIGKILL the worker in a settlement (else server {self.server}'s), "
            f"restart {_hms(self.lasting)} later",
            ChaosKind.PAYOUT_KILL: f"pin the payout write, SIGKILL its worker, restart {_hms(self.lasting)} later",
            ChaosKind.WORKER_PAUSE: f"SIGSTOP the worker in a settlement (else server {self.server}'s) for "
            f"{_hms(self.lasting)}, then SIGCONT",
            ChaosKind.SCHEDULER_KILL: f"SIGKILL scheduler-{self.server}, restart {_hms(self.lasting)} later",
            ChaosKind.DB_TERMINATE: f"pg_terminate_backend every connection of {self.process}",
            ChaosKind.CLOCK_SKEW: f"restart scheduler-{self.server} with its clock {self.skew:+.1f} s off",
            ChaosKind.SERVER_JOIN: f"server {self.server} joins (clock {self.skew:+.1f} s off)",
            ChaosKind.SERVER_LEAVE: f"server {self.server} leaves (clean stop)",
            ChaosKind.PROVIDER_COMMIT_TIMEOUT: f"the provider commits the next {self.requests} transfer requests "
            "and never answers them (the sender times out)",
            ChaosKind.PROVIDER_COMMIT_500: f"the provider commits the next {self.requests} transfer requests, "
            "then answers 500",
            ChaosKind.PROVIDER_DOWN: f"the provider answers 503 to every request for {_hms(self.lasting)}",
            ChaosKind.SENDER_KILL: "slow the provider's answers to a send-transfers run, pin its local write, "
            f"SIGKILL its worker between the two, restart {_hms(self.lasting)} later",
            ChaosKind.LEADER_KILL: "SIGKILL the database primary's postmaster; the cluster's manager promotes a "
            "standby, and every process finds it through the multi-host URL",
        }[self.kind]
        return f"+{at} {self.kind}: {what}"


@dataclass(frozen=True)
class ChaosSchedule:
    seed: int
    skews: tuple[float, ...]  # the first servers' clock offsets
    faults: tuple[ChaosFault, ...]
    rate: float = DEFAULT_RATE

    @property
    def max_skew(self) -> float:
        offsets = [*self.skews, *(f.skew for f in self.faults)]
        return max((abs(offset) for offset in offsets), default=0.0)

    def by_kind(self) -> dict[str, int]:
        counts = Counter(str(fault.kind) for fault in self.faults)
        kinds = [*ALWAYS_DRAWN, *([ChaosKind.LEADER_KILL] if counts[ChaosKind.LEADER_KILL] else [])]
        return {str(kind): counts[kind] for kind in kinds}

    def lines(self) -> list[str]:
        clocks = ", ".join(f"server {n} {skew:+.1f} s" for n, skew in enumerate(self.skews, start=1))
        return [
            f"chaos seed {self.seed}: {len(self.faults)} faults ({self.rate:g} per simulated hour); clocks {clocks}",
            *(f"  {f.line()}" for f in self.faults),
        ]


def chaos_schedule(
    *,
    seed: int,
    start: datetime,
    duration: timedelta,
    servers: int,
    postgres: bool = True,
    rate: float = DEFAULT_RATE,
    leader_kills: int = 0,
) -> ChaosSchedule:
    """The fault schedule of ``seed`` (see the module doc, step 1). ``leader_kills``: that
    many leader kills besides, at instants drawn from a generator of their own, so a seed's
    other faults are the same with and without them (for a high-availability cluster:
    ``simulate --chaos SEED --leader-kills N``)."""
    if not 0 < rate <= MAX_RATE:
        raise ValueError(f"give more than 0 and at most {MAX_RATE:g} faults per simulated hour, not {rate:g}")
    rng = random.Random(seed)
    skews = tuple(_skew(rng) for _ in range(servers))
    first, last = min(duration * QUIET_START, QUIET_START_LONGEST), duration * (1 - QUIET_END)
    kinds = [kind for kind in _WEIGHTS if postgres or kind != ChaosKind.DB_TERMINATE]
    total = round(duration.total_seconds() / 3600 * rate)
    each = max(1, total // (len(_WEIGHTS) + 1))
    extra = max(0, total - each * len(kinds))
    drawn = [*kinds * each, *rng.choices(kinds, weights=[_WEIGHTS[k] for k in kinds], k=extra)]
    payout = _payout_instant(start, first, last) if postgres else None
    sending_from, sending_to = _sending_window(start, duration, first, last)
    timed = sorted((timedelta(seconds=round(rng.uniform(
        *((sending_from, sending_to) if kind in _PROVIDER_KINDS else (first.total_seconds(), last.total_seconds()))
    ))), kind) for kind in drawn)  # fmt: skip
    if payout is not None:
        timed = sorted([*timed, (payout, ChaosKind.PAYOUT_KILL)])
        if sending_from > payout.total_seconds():  # first in the window where transfers are sent
            timed = sorted([*timed, (timedelta(seconds=sending_from), ChaosKind.SENDER_KILL)])
            # The commit faults a second apart right after the payout kill, in the order drawn,
            # at most COMMITS_AFTER_PAYOUT of them; the rest are drawn again as other kinds.
            commits, others = _commits_kept(seed, timed, kinds, first, last, (sending_from, sending_to))
            timed = sorted([
                *((at, kind) for at, kind in timed if kind not in _COMMIT_KINDS),
                *((payout + timedelta(seconds=n), kind) for n, kind in enumerate(commits, start=1)),
                *others,
            ])  # fmt: skip
    leader_rng = random.Random(f"{seed}-leader-kill")
    span = (first.total_seconds(), last.total_seconds())
    kills = [(timedelta(seconds=round(leader_rng.uniform(*span))), ChaosKind.LEADER_KILL) for _ in range(leader_kills)]
    timed = sorted([*timed, *kills])
    members, joined = list(range(1, servers + 1)), servers
    faults = []
    for index, (at, kind) in enumerate(timed):
        if kind == ChaosKind.SERVER_LEAVE and len(members) <= 2:  # never fewer than two servers:
            kind = ChaosKind.SERVER_JOIN  # a later join comes now and this leave then (else it is a join)
            later = next((i for i in range(index + 1, len(timed)) if timed[i][1] == ChaosKind.SERVER_JOIN), None)
            if later is not None:
                timed[later] = (timed[later][0], ChaosKind.SERVER_LEAVE)
        if kind == ChaosKind.SERVER_JOIN:
            joined += 1
            members.append(joined)
            faults.append(ChaosFault(kind, at, joined, skew=_skew(rng)))
            continue
        if kind in (*_PROVIDER_KINDS, ChaosKind.SENDER_KILL, ChaosKind.LEADER_KILL):  # no server of the app
            faults.append(_fault(rng, kind, at, 0))
            continue
        server = rng.choice(members)
        if kind == ChaosKind.SERVER_LEAVE:
            members.remove(server)
        faults.append(_fault(rng, kind, at, server))
    return ChaosSchedule(seed=seed, skews=skews, faults=tuple(faults), rate=rate)


def _commits_kept(
    seed: int,
    timed: list[tuple[timedelta, ChaosKind]],
    kinds: list[ChaosKind],
    first: timedelta,
    last: timedelta,
    sending: tuple[float, float],
) -> tuple[list[ChaosKind], list[tuple[timedelta, ChaosKind]]]:
    """The commit faults that come right after the payout kill, in the order drawn: the
    first of each kind, then the earliest others, COMMITS_AFTER_PAYOUT in all; and the
    faults that replace the rest, drawn by the weights of the other kinds (a provider-down
    in the sending window, the others in the active window) from a generator of their own,
    so a schedule with no more commit faults than that is the same as before there was a
    cap."""
    commits = [index for index, (_, kind) in enumerate(timed) if kind in _COMMIT_KINDS]
    kept = [next(i for i in commits if timed[i][1] == kind) for kind in _COMMIT_KINDS if kind in kinds]
    kept = sorted([*kept, *[i for i in commits if i not in kept][: max(0, COMMITS_AFTER_PAYOUT - len(kept))]])
    rng = random.Random(f"{seed}-commits-redrawn")
    instead = [kind for kind in kinds if kind not in _COMMIT_KINDS]
    redrawn = rng.choices(instead, weights=[_WEIGHTS[k] for k in instead], k=len(commits) - len(kept))
    span = (first.total_seconds(), last.total_seconds())
    others = [
        (timedelta(seconds=round(rng.uniform(*(sending if kind in _PROVIDER_KINDS else span)))), kind)
        for kind in redrawn
    ]
    return [timed[i][1] for i in kept], others


def _fault(rng: random.Random, kind: ChaosKind, at: timedelta, server: int) -> ChaosFault:
    if kind in (ChaosKind.WORKER_KILL, ChaosKind.PAYOUT_KILL, ChaosKind.SENDER_KILL):
        return ChaosFault(kind, at, server, lasting=_seconds(rng, 20, 300))  # a supervisor restarting it
    if kind == ChaosKind.WORKER_PAUSE:  # past the settlement's heartbeat timeout
        return ChaosFault(kind, at, server, lasting=_seconds(rng, SETTLEMENT_TIMEOUT_SECONDS + 30, 900))
    if kind == ChaosKind.SCHEDULER_KILL:
        return ChaosFault(kind, at, server, lasting=_seconds(rng, 30, 600))
    if kind == ChaosKind.CLOCK_SKEW:
        return ChaosFault(kind, at, server, skew=_skew(rng))
    if kind == ChaosKind.DB_TERMINATE:
        return ChaosFault(kind, at, server, process=rng.choice([f"worker-{server}", f"scheduler-{server}", "orders"]))
    if kind in (ChaosKind.PROVIDER_COMMIT_TIMEOUT, ChaosKind.PROVIDER_COMMIT_500):
        return ChaosFault(kind, at, server, requests=rng.randint(1, 3))
    if kind == ChaosKind.PROVIDER_DOWN:  # the backoff doubles a few times; retried before the end
        return ChaosFault(kind, at, server, lasting=_seconds(rng, 60, 180))
    return ChaosFault(kind, at, server)


def _skew(rng: random.Random) -> float:
    return round(rng.uniform(-MAX_SKEW_SECONDS, MAX_SKEW_SECONDS), 1)


def _seconds(rng: random.Random, low: float, high: float) -> timedelta:
    return timedelta(seconds=round(rng.uniform(low, high)))


def _sending_window(start: datetime, duration: timedelta, first: timedelta, last: timedelta) -> tuple[float, float]:
    """Seconds into the run between which the provider's faults come: from PAYOUT_RETRIED
    after the payout kill (its run's transfers are written once its retry succeeded) to
    the provider's quiet end; the whole active window if there is no payout tick in it, or
    no room after it."""
    payout = _payout_instant(start, first, last)
    end = duration * (1 - PROVIDER_QUIET_END)
    if payout is None or payout + PAYOUT_RETRIED >= end:
        return first.total_seconds(), last.total_seconds()
    return (payout + PAYOUT_RETRIED).total_seconds(), end.total_seconds()


def _payout_instant(start: datetime, first: timedelta, last: timedelta) -> timedelta | None:
    """Before the first payout tick inside the active window, if there is one, by more than
    the fastest clock's lead (a scheduler that far ahead claims the tick that early)."""
    lead = timedelta(seconds=MAX_SKEW_SECONDS + 90)
    ticks = cron.ticks_between(PAYOUT_CRON, "UTC", start + first + lead, start + last)
    return ticks[0] - start - lead if ticks else None


def _hms(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclass
class _ArmedCommit:
    """A commit fault armed at the provider and not settled yet."""

    record: ChaosRecord
    mode: str
    before: frozenset[str]  # the provider's transfers when it was armed
    left: int  # its requests not hit yet (as the provider last said)


@dataclass
class ChaosRecord:
    """What one fault hit, and (filled in later) how the system recovered."""

    fault: ChaosFault
    at: datetime
    target: str
    hit: str
    run_id: int | None = None
    recovered: str = ""
    story_of: Callable[[], str] | None = field(default=None, repr=False)

    @property
    def injected(self) -> bool:
        return not self.hit.startswith(NOT_INJECTED)

    def line(self) -> str:
        return f"{self.fault.kind} {self.target} at {self.at:%Y-%m-%d %H:%M:%S}: {self.hit}"

    def story(self) -> str:
        parts = [run_story(run_id=self.run_id)] if self.run_id is not None else []
        parts += [self.story_of()] if self.story_of else []
        parts += [self.recovered] if self.recovered else []
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {"kind": str(self.fault.kind), "line": self.line(), "recovery": self.story()}


class ChaosSimulation(Simulation):
    """The simulation with the faults of a ``ChaosSchedule`` (see the module doc, step 2)."""

    def __init__(
        self,
        plan: SimulationPlan,
        schedule: ChaosSchedule,
        *,
        log_dir: Path,
        say: Callable[[str], None],
        pooled: Pooled | None = None,
        provider: RunningSandbox | None = None,
    ):
        super().__init__(plan, log_dir=log_dir, say=say, provider=provider)
        self.schedule = schedule
        self.pooled = pooled  # the PgBouncer the processes reach the database through (plan.environment)
        self.gone: set[int] = set()  # servers that left
        self.offsets: dict[int, float] = dict(enumerate(schedule.skews, start=1))
        self.next_at = plan.start  # when the fault after the one being injected is due
        # The runs a kill or a pause landed in, each with the fences of the attempts hit: the
        # report explains a dead run with a fault in every attempt (simulation_report's ``struck``).
        self.struck: dict[int, set[int | None]] = {}
        self.commits: list[_ArmedCommit] = []  # commit faults armed at the provider, in turn

    def run(self) -> SimulationOutcome:
        """The run, then each record's story told while the provider still runs (a commit
        fault's reads the provider's transfers; the sandbox stops after this returns)."""
        outcome = super().run()
        for record in outcome.faults:
            if isinstance(record, ChaosRecord) and record.story_of is not None:
                record.story_of = partial(str, record.story_of())
        return outcome

    def _injections(self) -> Iterator[tuple[datetime, Callable[[], None]]]:
        instants = [self.plan.start + fault.at for fault in self.schedule.faults]
        for index, fault in enumerate(self.schedule.faults):
            self.next_at = instants[index + 1] if index + 1 < len(instants) else self._quiet_from(fault.kind)
            yield instants[index], partial(self._chaos, fault)

    def _start_servers(self) -> None:
        for number, skew in self.offsets.items():
            self._start_server(number, skew=skew, worker_skew=skew)
        self._start_traffic()

    def _chaos(self, fault: ChaosFault) -> None:
        close_old_connections()
        # The injector fell behind (a loaded machine, a slow clean stop): what needs recovering
        # is let go; a server joining or a scheduler restarted on a new clock needs none.
        if self.clock.now() > self._quiet_from(fault.kind) and fault.kind not in _NOTHING_TO_RECOVER:
            self._record(
                self._not_injected(fault, f"reached at {self.clock.now():%H:%M:%S}, inside the quiet end of the run")
            )
            return
        inject = {
            ChaosKind.WORKER_KILL: self._worker_kill,
            ChaosKind.PAYOUT_KILL: self._payout_kill,
            ChaosKind.WORKER_PAUSE: self._worker_pause,
            ChaosKind.SCHEDULER_KILL: self._scheduler_kill,
            ChaosKind.DB_TERMINATE: self._db_terminate,
            ChaosKind.CLOCK_SKEW: self._clock_skew,
            ChaosKind.SERVER_JOIN: self._server_join,
            ChaosKind.SERVER_LEAVE: self._server_leave,
            ChaosKind.PROVIDER_COMMIT_TIMEOUT: self._provider_commit,
            ChaosKind.PROVIDER_COMMIT_500: self._provider_commit,
            ChaosKind.PROVIDER_DOWN: self._provider_down,
            ChaosKind.SENDER_KILL: self._sender_kill,
            ChaosKind.LEADER_KILL: self._leader_kill,
        }[fault.kind]
        self._record(inject(fault))

    def _quiet_from(self, kind: ChaosKind | None = None) -> datetime:
        provider_side = kind in (*_PROVIDER_KINDS, ChaosKind.SENDER_KILL)
        return self.plan.start + self.plan.duration * (1 - (PROVIDER_QUIET_END if provider_side else QUIET_END))

    def _worker_in_flight(self, fault: ChaosFault) -> tuple[Process | None, JobRun | None]:
        """The running worker with a settlement in flight (waiting up to TARGET_WAIT_SECONDS
        for one, and no later than the next fault is due, so the waits do not push the
        schedule back), else the fault's server's worker (or another live one) with what it
        runs, passing over a worker that runs a run an earlier fault landed in (None if
        every live worker does)."""
        found: tuple[Process, JobRun] | None = None

        def in_flight() -> bool:
            nonlocal found
            found = self._settlement_in_flight()
            return found is not None

        if self._wait(in_flight, until=self.next_at, real_limit=self.clock.real_seconds(TARGET_WAIT_SECONDS)):
            assert found is not None
            return found
        for worker in self._alive(f"worker-{fault.server}", "worker-", running=True):
            runs = _runs_of(worker)
            if not {run.id for run in runs} & self.struck.keys():
                return worker, runs[0] if runs else None
        return None, None

    def _settlement_in_flight(self) -> tuple[Process, JobRun] | None:
        """A settlement run and its worker, if that worker is alive and not paused (a run
        whose worker was just killed or stopped is still ``running`` for a while), and no
        earlier fault landed in the run: the faults spread over runs instead of spending
        one run's attempts (three kills of one run make it dead, as its job's
        max_attempts says; seed 4 behind the pooler did that at 16 faults an hour)."""
        running = _running()
        for run in running:
            if run.job_name != TARGET_JOB or run.id in self.struck:
                continue
            owner = self.fleet.owner_of(_pid(run.worker))
            if owner is None or not owner.alive() or owner.signals[-1:] == ["SIGSTOP"]:
                continue
            if not {other.id for other in _owned(running, owner)} & self.struck.keys():  # its other task too
                return owner, run
        return None

    def _live(self, name: str, prefix: str) -> Process | None:
        """``name`` if it is alive, else another live process of ``prefix`` (None if every one
        is killed or gone)."""
        alive = self._alive(name, prefix)
        return alive[0] if alive else None

    def _alive(self, name: str, prefix: str, *, running: bool = False) -> list[Process]:
        """The live processes of ``prefix``, ``name`` first; ``running``: the paused (SIGSTOP)
        last, so two pauses do not share a victim."""
        candidates = [self.fleet.processes[name]] if name in self.fleet.processes else []
        candidates += [p for p in self.fleet.named(prefix) if p.name != name]
        alive = [p for p in candidates if p.alive()]
        return sorted(alive, key=lambda p: p.signals[-1:] == ["SIGSTOP"]) if running else alive

    def _not_injected(self, fault: ChaosFault, why: str) -> ChaosRecord:
        return ChaosRecord(fault, self.clock.now(), "-", f"{NOT_INJECTED}: {why}")

    def _nobody(self, fault: ChaosFault, what: str) -> ChaosRecord:
        return self._not_injected(fault, f"no live {what} (killed or gone)")

    def _worker_kill(self, fault: ChaosFault) -> ChaosRecord:
        victim, run = self._worker_in_flight(fault)
        if victim is None:
            return self._not_injected(fault, EVERY_WORKER_SPENT)
        self._strike(victim, signal.SIGKILL)
        self._later(fault.lasting, partial(self._restart_unless_gone, victim))
        return self._hit(fault, victim, run, "SIGKILL")

    def _worker_pause(self, fault: ChaosFault) -> ChaosRecord:
        victim, run = self._worker_in_flight(fault)
        if victim is None:
            return self._not_injected(fault, EVERY_WORKER_SPENT)
        self._strike(victim, signal.SIGSTOP)
        self._later(fault.lasting, partial(self._resume, victim))
        return self._hit(fault, victim, run, f"SIGSTOP for {_hms(fault.lasting)}")

    def _strike(self, victim: Process, sig: signal.Signals) -> None:
        """Send ``sig`` to a worker, counting every run it has in flight as hit first (not
        only the one its record names: a worker runs Q_WORKERS tasks at once), so a later
        kill or pause passes over them and no run loses all its attempts to faults (seed 4
        of the 20-seed table: kills of the same worker landed in one settlement run's three
        attempts, and it went dead). The payout and sender kills cannot pass over them (they
        take the worker that runs their run), so the fence of each attempt hit is kept too."""
        for run in _runs_of(victim):
            self.struck.setdefault(run.id, set()).add(run.fence)
        victim.send(sig)

    def _hit(self, fault: ChaosFault, victim: Process, run: JobRun | None, what: str) -> ChaosRecord:
        hit = f"{what}; run {run.id} ({run.job_name}, fence {run.fence}) in flight" if run else f"{what}; idle"
        return ChaosRecord(fault, self.clock.now(), victim.name, hit, run_id=run.id if run else None)

    def _payout_kill(self, fault: ChaosFault) -> ChaosRecord:
        """Hold a SHARE lock on the payout table from the tick on, so the payout run's
        INSERT waits inside its transaction; SIGKILL its worker there, then let go."""
        with _own_connection() as pin:
            pin.execute("LOCK TABLE payouts_payout IN SHARE MODE")
            finished = JobRun.objects.filter(job_name=PAYOUT_JOB, finished_at__isnull=False)
            self._wait(
                lambda: _blocked_by(pin) > 0 or _fresh(finished), until=self._quiet_from(), real_limit=PIN_WAIT_SECONDS
            )
            if not _blocked_by(pin):
                pin.rollback()
                return self._not_injected(
                    fault, f"the payout run had not reached its write by {self.clock.now():%H:%M:%S}"
                )
            if self.clock.now() > self._quiet_from():  # too late to recover before the end
                pin.rollback()
                return self._not_injected(fault, "the write blocked in the quiet end")
            close_old_connections()
            run = JobRun.objects.filter(job_name=PAYOUT_JOB, status=RunStatus.RUNNING).order_by("-started_at").first()
            victim = self.fleet.owner_of(_pid(run.worker)) if run else None
            if victim is not None:
                self._strike(victim, signal.SIGKILL)
                wait_for(lambda: not victim.alive(), timeout=10, what="the payout worker dying")
            pin.rollback()
        if run is None or victim is None:
            return ChaosRecord(fault, self.clock.now(), "-", "the blocked payout write had no worker of this fleet")
        self._later(fault.lasting, partial(self._restart_unless_gone, victim))
        return self._hit(fault, victim, run, "SIGKILL inside the payout INSERT")

    def _scheduler_kill(self, fault: ChaosFault) -> ChaosRecord:
        victim = self._live(f"scheduler-{fault.server}", "scheduler-")
        if victim is None:
            return self._nobody(fault, "scheduler")
        victim.send(signal.SIGKILL)
        down = self.clock.now()
        self._later(fault.lasting, partial(self._restart_unless_gone, victim))
        record = ChaosRecord(fault, down, victim.name, f"SIGKILL; down for {_hms(fault.lasting)}")
        record.story_of = partial(_claims_while_down, down, down + fault.lasting)
        return record

    def _db_terminate(self, fault: ChaosFault) -> ChaosRecord:
        """pg_terminate_backend on the process's backends, found by the application_name its
        connections carry (PGAPPNAME), polling for up to TERMINATE_WINDOW_SECONDS until there
        is at least one. Behind PgBouncer the backends are the pooler's server
        connections, shared in turn by every process: PgBouncer sets a server connection's
        application_name to that of the client it lends it to, so the ones named after the
        process are those serving it now (inside its transaction or statement, which fails,
        and PgBouncer closes that client connection) and idle ones it was the last to use
        (PgBouncer replaces them; a process handed one just as it died sees the error)."""
        name = fault.process
        process = self.fleet.processes.get(name)
        if process is None or not process.alive():
            worker = self._live(f"worker-{fault.server}", "worker-")
            if worker is None:
                return self._nobody(fault, "process")
            name = worker.name
        rows: list[str] = []

        def terminated() -> bool:  # a process holds a connection only while it uses one, behind the pooler
            rows.extend(_terminate(name))
            return bool(rows)

        until = min(self.clock.now() + timedelta(seconds=TERMINATE_WINDOW_SECONDS), self.next_at)
        self._wait(terminated, until=until, real_limit=self.clock.real_seconds(TERMINATE_WINDOW_SECONDS))
        states = Counter(state for state in rows)
        in_transaction = states["active"] + states["idle in transaction"]
        if self.pooled is None:
            hit = f"{len(rows)} connections terminated ({in_transaction} inside a transaction or statement)"
        else:
            hit = (
                f"{len(rows)} PgBouncer server connections named after it terminated ({in_transaction} serving it "
                f"inside a transaction or statement, {len(rows) - in_transaction} idle in the pool)"
            )
        record = ChaosRecord(fault, self.clock.now(), name, hit)
        self._later(timedelta(minutes=1), partial(self._reconnected, record, name))
        return record

    def _reconnected(self, record: ChaosRecord, name: str) -> None:
        process = self.fleet.processes[name]
        alive = "alive" if process.alive() else "NOT alive"
        if self.pooled is None:
            count = _connections_of(name)
            record.recovered = f"a minute later {name} was {alive} with {count} connections"
            return
        clients = sum(1 for client in self.pooled.clients() if client["application_name"] == name)
        record.recovered = f"a minute later {name} was {alive} with {clients} client connections to PgBouncer"

    def _clock_skew(self, fault: ChaosFault) -> ChaosRecord:
        if fault.server in self.gone:
            return ChaosRecord(fault, self.clock.now(), f"scheduler-{fault.server}", "server gone: nothing to do")
        process = self.fleet[f"scheduler-{fault.server}"]
        before = self.offsets[fault.server]
        self.fleet.stop([process])
        process.env.update(self._env(skew=fault.skew))
        self.fleet.restart(process.name)
        self.offsets[fault.server] = fault.skew
        return ChaosRecord(fault, self.clock.now(), process.name, f"clock {before:+.1f} s -> {fault.skew:+.1f} s")

    def _server_join(self, fault: ChaosFault) -> ChaosRecord:
        self._start_server(fault.server, skew=fault.skew, worker_skew=fault.skew)
        self.offsets[fault.server] = fault.skew
        return ChaosRecord(fault, self.clock.now(), f"server {fault.server}", "worker and scheduler started")

    def _server_leave(self, fault: ChaosFault) -> ChaosRecord:
        worker = self.fleet[f"worker-{fault.server}"]
        run = _run_of(worker)
        self.gone.add(fault.server)
        codes = self.fleet.stop([self.fleet[f"scheduler-{fault.server}"], worker])
        clean = all(code is not None for code in codes.values())
        hit = f"stopped {'cleanly' if clean else 'after the grace period (SIGKILL)'}"
        hit += f"; run {run.id} ({run.job_name}) was in flight" if run else "; idle"
        return ChaosRecord(fault, self.clock.now(), f"server {fault.server}", hit, run_id=run.id if run else None)

    def _provider_commit(self, fault: ChaosFault) -> ChaosRecord:
        """Arm commit-then-timeout or commit-then-500 for ``fault.requests`` transfer
        requests, behind the commit faults armed before it (the provider takes them in
        turn), and go on: the record says what it hit once its requests came
        (``_settle_commits``), or, if none came before another provider fault needed the
        provider or the provider's quiet end, that it was not injected. The transfers the
        provider committed meanwhile are what the record follows to the end."""
        sandbox = self.provider
        if sandbox is None:
            return self._not_injected(fault, "the run has no provider")
        armed = sandbox.state()["fault"]
        if armed is not None and not self.commits:
            return self._not_injected(fault, f"the provider already has a fault armed ({armed['mode']})")
        mode = "commit-then-timeout" if fault.kind == ChaosKind.PROVIDER_COMMIT_TIMEOUT else "commit-then-500"
        before = frozenset(item.id for item in provider.transfers_all(client=provider_client_for(sandbox.url)))
        ahead = sum(commit.left for commit in self.commits)
        sandbox.arm_fault(mode, count=fault.requests, delay_ms=COMMIT_TIMEOUT_HOLD_MS, methods=("POST",), then=True)
        behind = f" behind {ahead} requests of earlier commit faults" if ahead else ""
        record = ChaosRecord(fault, self.clock.now(), "provider", f"armed for the next {fault.requests} transfer "
                             f"requests{behind} ({mode})")  # fmt: skip
        self.commits.append(_ArmedCommit(record, mode, before, left=fault.requests))
        if len(self.commits) == 1:
            self._later(COMMIT_WATCH, self._watch_commits)
        return record

    def _watch_commits(self) -> None:
        """Every COMMIT_WATCH while commit faults are armed: settle those that have hit
        their requests; at the provider's quiet end, the rest."""
        self._settle_commits(final=self.clock.now() >= self._quiet_from(ChaosKind.PROVIDER_COMMIT_TIMEOUT))
        if self.commits:
            self._later(COMMIT_WATCH, self._watch_commits)

    def _settle_commits(self, *, final: bool = False) -> None:
        """Fill in the records of the commit faults the provider has taken in full (its
        armed faults are the rest of ``self.commits``, in order); ``final``: disarm the
        rest and fill theirs in with what they hit (not injected if nothing)."""
        sandbox = self.provider
        if not self.commits or sandbox is None:
            return
        queued = [f for f in sandbox.state()["faults"] if f["mode"] in ("commit-then-timeout", "commit-then-500")]
        if len(queued) > len(self.commits):
            raise RuntimeError(f"the provider holds {len(queued)} commit faults; {len(self.commits)} were armed")
        spent = len(self.commits) - len(queued)
        if queued:
            self.commits[spent].left = queued[0]["count"]
        if final:
            sandbox.clear_fault()
        for index, commit in enumerate(list(self.commits)):
            if index >= spent and not final:
                break
            requests = commit.record.fault.requests
            hit_count = requests if index < spent else requests - commit.left
            self.commits.remove(commit)
            if not hit_count:
                commit.record.hit = f"{NOT_INJECTED}: no transfer request came by {self.clock.now():%H:%M:%S}"
                commit.record.target = "-"
            else:
                held = provider.transfers_all(client=provider_client_for(sandbox.url))
                groups = sorted({item.transfer_group for item in held if item.id not in commit.before})
                commit.record.hit = (
                    f"{hit_count} transfer requests committed at the provider and their answers lost ({commit.mode})"
                )
                commit.record.story_of = partial(_groups_story, sandbox.url, groups)
            self.say(f"{commit.record.line()} (by {self.clock.now():%H:%M:%S})")

    def _provider_free(self, fault: ChaosFault) -> None:
        """Before a provider fault of another kind takes the provider: wait (until the quiet
        end) for the commit faults armed before it to hit their requests (a transfer they
        failed is sent again, so they wait only while one is unsent), then settle them
        (those left are disarmed)."""
        sandbox = self.provider
        if not self.commits or sandbox is None:
            return

        def free() -> bool:
            if sandbox.state()["fault"] is None:
                return True
            close_old_connections()
            return Transfer.objects.exists() and not _unsent_transfers()

        self._wait(free, until=self._quiet_from(fault.kind), real_limit=PIN_WAIT_SECONDS)
        self._settle_commits(final=sandbox.state()["fault"] is not None)

    def _provider_down(self, fault: ChaosFault) -> ChaosRecord:
        """The provider answers 503 to everything for ``fault.lasting``."""
        sandbox = self.provider
        if sandbox is None:
            return self._not_injected(fault, "the run has no provider")
        self._provider_free(fault)
        sandbox.arm_fault("down")
        unsent = _unsent_transfers()
        record = ChaosRecord(fault, self.clock.now(), "provider", f"down for {_hms(fault.lasting)}; {unsent} unsent")
        self._later(fault.lasting, partial(self._provider_up, record))
        return record

    def _provider_up(self, record: ChaosRecord) -> None:
        sandbox = self.provider
        assert sandbox is not None
        armed = sandbox.state()["fault"]
        if armed is not None and armed["mode"] == "down":
            sandbox.clear_fault()
        record.recovered = f"back up at {self.clock.now():%H:%M:%S} with {_unsent_transfers()} transfers unsent"
        self.say(f"the provider is back up at {self.clock.now():%Y-%m-%d %H:%M:%S}")

    def _sender_kill(self, fault: ChaosFault) -> ChaosRecord:
        """SIGKILL a send-transfers worker after the provider answered and before the
        ledger recorded the answers: the provider takes SENDER_SLOW_MS over each transfer
        request (its ``slow`` fault); once requests are in flight the sender's fence row is
        locked, so its write of the answers waits; once the answers are all back and the
        write waits, the worker is killed, then the lock let go. It waits for a send while
        one may still come (``_transfers_coming``: the payout run on its way, or a transfer
        pending, however long its backoff), until the provider's quiet end: a transfer the
        commit faults failed again and again is due only an hour later, past any real limit
        of a few minutes on a loaded machine."""
        sandbox = self.provider
        if sandbox is None:
            return self._not_injected(fault, "the run has no provider")
        self._provider_free(fault)
        sandbox.arm_fault("slow", delay_ms=SENDER_SLOW_MS, methods=("POST",))
        try:
            with _own_connection() as pin:
                seen: list[int] = []

                def sending_or_none_coming() -> bool:
                    seen.append(sandbox.state()["in_flight"])
                    return seen[-1] > 0 or not self._transfers_coming()

                self._wait(sending_or_none_coming, until=self._quiet_from(fault.kind), real_limit=float("inf"))
                if not seen[-1]:
                    return self._not_injected(fault, f"no transfer was sent by {self.clock.now():%H:%M:%S}")
                pin.execute("SELECT token FROM job_fences WHERE resource = %s FOR UPDATE", [SEND_FENCE_RESOURCE])
                answered = self._wait(
                    lambda: _blocked_by(pin) > 0 and sandbox.state()["in_flight"] == 0,
                    until=self._quiet_from(fault.kind),
                    real_limit=PIN_WAIT_SECONDS,
                )
                run = _send_run()
                victim = self.fleet.owner_of(_pid(run.worker)) if run else None
                if not answered or run is None or victim is None:
                    pin.rollback()
                    return self._not_injected(fault, "the sender's write of the answers did not wait on the pin")
                recorded = Transfer.objects.filter(status=TransferStatus.SENT).count()
                held = sandbox.state()["transfers"]
                self._strike(victim, signal.SIGKILL)
                wait_for(lambda: not victim.alive(), timeout=10, what="the sender's worker dying")
                pin.rollback()
        finally:
            sandbox.clear_fault()
        self._later(fault.lasting, partial(self._restart_unless_gone, victim))
        record = self._hit(fault, victim, run, f"SIGKILL with {held - recorded} answers received and not recorded")
        return record

    def _leader_kill(self, fault: ChaosFault) -> ChaosRecord:
        """SIGKILL the primary's postmaster (found from its data directory's postmaster.pid:
        the cluster runs on this machine), then wait, with no other query of the injector's
        meanwhile, until a writable primary answers on a new timeline. Its story: whether the
        tokens went up across it (``_fences_across``)."""
        with _own_connection() as conn:
            (data_directory,) = _one(conn, "SELECT current_setting('data_directory')")
            timeline = _one(conn, queries.FENCE_STATE)[0]  # the fencing tokens' epoch
        postmaster = int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
        killed, began = self.clock.now(), time.monotonic()
        os.kill(postmaster, signal.SIGKILL)
        connection.close()  # Django's connection went with it
        found: list[int] = []  # the new timeline, and the last event there when it took writes

        def promoted() -> bool:
            try:
                with _own_connection() as conn:
                    found[:] = [int(_one(conn, queries.FENCE_STATE)[0]), int(_one(conn, _LAST_EVENT)[0])]
            except psycopg.Error:
                return False
            return bool(found[0] != timeline)

        wait_for(promoted, timeout=LEADER_WAIT_SECONDS, interval=0.2, what="a writable primary on a new timeline")
        hit = f"SIGKILL; a primary on timeline {found[0]} took writes {time.monotonic() - began:.1f} s later"
        record = ChaosRecord(fault, killed, f"the primary (timeline {timeline}, postmaster {postmaster})", hit)
        record.story_of = partial(_fences_across, int(timeline), found[0], found[1])
        return record

    def _restart_unless_gone(self, process: Process) -> None:
        if int(process.name.rsplit("-", 1)[1]) in self.gone or process.alive():
            return
        self._restart(process)


def _unsent_transfers() -> int:
    close_old_connections()
    return Transfer.objects.exclude(status=TransferStatus.SENT).count()


def _send_run() -> JobRun | None:
    close_old_connections()
    return JobRun.objects.filter(job_name=SEND_TRANSFERS_JOB, status=RunStatus.RUNNING).order_by("-started_at").first()


def _groups_story(provider_url: str, groups: list[str]) -> str:
    """After the run: how many transfers the provider holds for each group a fault hit,
    and what the ledger recorded."""
    if not groups:
        return "no transfer was committed while it was armed"
    held = Counter(item.transfer_group for item in provider.transfers_all(client=provider_client_for(provider_url)))
    once = sum(1 for group in groups if held[group] == 1)
    sent = Transfer.objects.filter(transfer_group__in=groups, status=TransferStatus.SENT).count()
    return (
        f"of the {len(groups)} transfers committed while it was armed, {once} held once by the provider, "
        f"{sent} recorded sent"
    )


def _fresh(queryset: QuerySet[JobRun]) -> bool:
    close_old_connections()
    return queryset.exists()


def _run_of(worker: Process) -> JobRun | None:
    runs = _runs_of(worker)
    return runs[0] if runs else None


def _runs_of(worker: Process) -> list[JobRun]:
    """The runs ``worker`` has in flight, oldest first."""
    return _owned(_running(), worker)


def _running() -> list[JobRun]:
    close_old_connections()
    return list(JobRun.objects.filter(status=RunStatus.RUNNING).order_by("started_at"))


def _owned(runs: list[JobRun], worker: Process) -> list[JobRun]:
    return [run for run in runs if worker.owns(_pid(run.worker))]


def _claims_while_down(down: datetime, up: datetime) -> str:
    claims = JobRun.objects.filter(trigger=Trigger.CRON, scheduled_for__gt=down, scheduled_for__lte=up)
    return f"{claims.count()} cron ticks due while it was down were claimed (by the others, or by it on its return)"


def _own_connection() -> psycopg.Connection[tuple[Any, ...]]:
    """A connection of the injector's own (not Django's), for a lock held across polls; to
    the writable one of several hosts, as Django's (``target_session_attrs``)."""
    db = settings.DATABASES["default"]
    attrs = {key: value for key, value in db["OPTIONS"].items() if key == "target_session_attrs"}
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=str(db["PORT"] or 5432),
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
        application_name="chaos-injector",
        **attrs,
    )


def _one(conn: psycopg.Connection[tuple[Any, ...]], query: str) -> tuple[Any, ...]:
    row = conn.execute(query).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query}")
    return row


def _fences_across(old: int, new: int, last_event: int) -> str:
    """The fencing tokens across a promotion from timeline ``old`` to ``new``: every token
    of the new epoch above every token of the old, and none of an older epoch taken after
    the new primary took writes (``started`` events past ``last_event``; a run's later
    events carry the token it started with)."""
    tokens = JobRunEvent.objects.filter(kind="started", fence__isnull=False)  # where a token is taken
    new_epoch = new << FENCE_COUNTER_BITS
    highest_old = tokens.filter(fence__lt=(old + 1) << FENCE_COUNTER_BITS).aggregate(m=Max("fence"))["m"]
    lowest_new = tokens.filter(fence__gte=new_epoch).aggregate(m=Min("fence"))["m"]
    stale = tokens.filter(id__gt=last_event, fence__lt=new_epoch).count()
    went_up = (highest_old is None or lowest_new is None or highest_old < lowest_new) and not stale
    return (
        f"tokens {'went up' if went_up else 'did NOT go up'} across it: the old epoch's highest "
        f"{highest_old}, the new epoch's lowest {lowest_new}; {stale} of an older epoch after the promotion"
    )


def _blocked_by(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    """How many backends wait for a lock ``conn`` holds."""
    conn.execute("SELECT pg_stat_clear_snapshot()")  # else read once per transaction
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
    ).fetchone()
    return int(row[0]) if row else 0


def _connections_of(application_name: str) -> int:
    close_old_connections()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        row = cursor.fetchone()
        return int(row[0]) if row else 0


def _terminate(application_name: str) -> list[str]:
    """pg_terminate_backend on every connection of the named process; their states."""
    close_old_connections()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()",
            [application_name],
        )
        return [state or "" for state, _ in cursor.fetchall()]
