"""The alternatives table with the real tools (``make compare-peers``): ``celery beat`` on
every server, ``celery beat`` with celery-redbeat's lock, django-q2's own schedules on
three clusters and procrastinate's periodic tasks on three workers, beside the claim,
through the same faults as ``make compare`` (simulation/strategy_runner.py: a run longer
than the lease, a frozen run, server 1 down) and counted by the same code from the same
``simulation_strategy_runs`` rows.

    .venv-peers/bin/python -m bench.peers.alternatives [--duration 30] [--speed 10]
        [--only celery-beat --only claim] [--faults all|none|long-run,pause,server-down]

The tools schedule on their own clocks, so a simulated minute is ``60 / speed`` real
seconds of theirs (6 s at the default 10x), and every duration a team would configure in
seconds is divided by the speed (the lease: redbeat's lock timeout, django-q2's
``retry``). The simulated clock's start is put on a multiple of that tick, so each real
tick of a tool is one simulated minute; each execution records the tick its tool gave it
(procrastinate's ``timestamp``, django-q2's intended date, Celery beat's send time),
converted to the simulated minute (bench/peers/alternatives_probe.py).

Each case: a database emptied of the previous case's rows and queues, Redis database 10
flushed (TIFFIN_ALTERNATIVES_REDIS_URL for another), the servers started, the faults at
the plan's instants, then the table's row. The claim's row is ``simulate --strategy
claim`` on the same plan.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.peers.alternatives_settings")
django.setup()

from django.db import close_old_connections, connection  # noqa: E402

from bench.peers.alternatives_probe import (  # noqa: E402
    SERVER_VARIABLE,
    STRATEGY_VARIABLE,
    nearest_minute,
    simulated_at,
    tick_seconds,
)
from simulation.models import StrategyRun  # noqa: E402
from simulation.strategies import LONG_RUNS_VARIABLE, Strategy, long_runs_text  # noqa: E402
from simulation.strategy_runner import (  # noqa: E402
    DOWN_FOR,
    PAUSE_AFTER,
    PAUSE_FOR,
    Boot,
    StrategyCase,
    StrategyFault,
    StrategyPlan,
    StrategyResult,
    comparison_table,
    execution_counts,
    result_line,
    run_case,
)
from support.processes import Fleet, Process, SimulatedTime, wait_for, wait_while_progressing  # noqa: E402

TOOLS = ("celery-beat", "celery-redbeat", "django-q2", "procrastinate")
CASES = (*TOOLS, "claim")
LABELS = {
    "celery-beat": "celery beat, every server",
    "celery-redbeat": "celery beat + redbeat lock",
    "django-q2": "django-q2 schedules, 3 clusters",
    "procrastinate": "procrastinate periodic, 3 workers",
    "claim": "claim",
}
START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)
REDIS_URL = os.environ.get("TIFFIN_ALTERNATIVES_REDIS_URL", "redis://127.0.0.1:6379/10")
BOOT_SECONDS = 25.0
# What each process logs once it is ready for the first tick.
READY = {
    "beat": "beat: Starting",
    "worker": "ready.",
    "qcluster": "running.",
    "procrastinate": "Starting worker",
}
# A redbeat beat that does not hold the lock waits for it inside beat's start: it is up,
# not yet "Starting"; readiness is its first log line.
REDBEAT_WAITING = "beat: Acquiring lock"


class PeerDeployment:
    """Three servers of one tool on a clock whose start is on a tick of theirs; the plan's
    faults on time; everything stopped at the end."""

    def __init__(self, plan: StrategyPlan, tool: str, *, log_dir: Path, say: Callable[[str], None]) -> None:
        self.plan, self.tool, self.say = plan, tool, say
        period = tick_seconds(plan.speed)
        anchor = math.ceil((time.time() + BOOT_SECONDS) / period) * period
        self.clock = SimulatedTime(start=plan.start, anchor=float(anchor), speed=plan.speed)
        self.environment = {
            **self.clock.environment(),
            "DJANGO_SETTINGS_MODULE": "bench.peers.alternatives_settings",
            LONG_RUNS_VARIABLE: long_runs_text(plan.long_runs()),
            STRATEGY_VARIABLE: tool,
            "TIFFIN_PEER_TICK_SECONDS": str(period),
            "TIFFIN_ALTERNATIVES_REDIS_URL": REDIS_URL,
            "LOG_LEVEL": "INFO",
        }
        self.fleet = Fleet(environment=self.environment, log_dir=log_dir)
        self.events: list[str] = []

    # --- the processes of one server ---

    def _start(self, name: str, argv: list[str], server: int) -> None:
        env = {**self.fleet.environment, "PGAPPNAME": name, SERVER_VARIABLE: f"server-{server}"}
        process = Process(name=name, argv=argv, env=env, log_path=self.fleet.log_dir / f"{name}.log")
        self.fleet.processes[name] = process
        process.start()

    def _start_server(self, number: int) -> None:
        python, manage = sys.executable, str(Path(__file__).resolve().parents[2] / "manage.py")
        if self.tool.startswith("celery"):
            celery = [python, "-m", "celery", "-A", "bench.peers.alternatives_celery"]
            schedule = str(self.fleet.log_dir / f"beat-{number}-schedule")
            self._start(f"beat-{number}", [*celery, "beat", "--loglevel", "INFO", "--schedule", schedule], number)
            worker = [*celery, "worker", "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
                      "--without-gossip", "--without-mingle", "--without-heartbeat",
                      "-n", f"server-{number}@%h"]  # fmt: skip
            self._start(f"worker-{number}", worker, number)
        elif self.tool == "django-q2":
            self._start(f"qcluster-{number}", [python, "-m", "bench.peers.alternatives_qcluster"], number)
        else:
            command = [python, manage, "procrastinate", "worker", "--concurrency", "2"]
            self._start(f"procrastinate-{number}", command, number)

    def _ready(self, process: Process) -> bool:
        text = process.log_tail(lines=400)
        kind = process.name.rsplit("-", 1)[0]
        if self.tool == "celery-redbeat" and kind == "beat" and REDBEAT_WAITING in text:
            return True
        return READY[kind] in text

    def _executor(self, server: int) -> Process:
        kind = {"django-q2": "qcluster", "procrastinate": "procrastinate"}.get(self.tool, "worker")
        return self.fleet.processes[f"{kind}-{server}"]

    # --- the run ---

    def run(self) -> list[str]:
        with self.fleet:
            if self.tool == "django-q2":
                self._schedule_djangoq()
            for number in range(1, self.plan.servers + 1):
                self._start_server(number)
            left = self.clock.real_time_at(self.plan.start) - time.time()
            try:
                wait_for(lambda: all(map(self._ready, self.fleet.processes.values())), timeout=max(left, 0))
            except TimeoutError:
                late = [p.name for p in self.fleet.processes.values() if not self._ready(p)]
                self._note(f"not ready at the start: {', '.join(late)}")
            pending: list[tuple[datetime, Callable[[], None]]] = []
            if StrategyFault.PAUSE in self.plan.faults:
                pending.append((self.plan.pause_tick + PAUSE_AFTER, self._pause))
            if StrategyFault.SERVER_DOWN in self.plan.faults:
                pending.append((self.plan.down_at, self._server_down))
            self.pending = pending
            while self.pending:
                self.pending.sort(key=lambda item: item[0])
                when, action = self.pending.pop(0)
                if when >= self.plan.end:
                    break
                self.clock.sleep_until(when)
                action()
            self.clock.sleep_until(self.plan.end)
            self._drain()
        return self.events

    def _note(self, line: str) -> None:
        line = f"{self.clock.now():%H:%M:%S} {line}"
        self.events.append(line)
        self.say(f"  {line}")

    def _pause(self) -> None:
        found: list[int] = []

        def seen() -> bool:
            close_old_connections()
            row = StrategyRun.objects.filter(
                strategy=self.tool, scheduled_for=self.plan.pause_tick, finished_at__isnull=True
            ).first()
            found[:] = [int(row.server.split()[0].rsplit("-", 1)[1])] if row else []
            return bool(found)

        try:
            timeout = self.clock.real_time_at(self.plan.end - PAUSE_FOR) - time.time()
            wait_for(seen, timeout=max(timeout, 0), interval=0.02)
        except TimeoutError:
            self._note(f"pause: no execution of the {self.plan.pause_tick:%H:%M} tick in flight, nothing paused")
            return
        victim = self._executor(found[0])
        victim.send(signal.SIGSTOP)
        self._note(f"pause: SIGSTOP {victim.name}, in the middle of the {self.plan.pause_tick:%H:%M} tick")
        self.pending.append((self.clock.now() + PAUSE_FOR, lambda: self._resume(victim)))

    def _resume(self, victim: Process) -> None:
        victim.send(signal.SIGCONT)
        self._note(f"pause: SIGCONT {victim.name}")

    def _server_down(self) -> None:
        victims = [p for name, p in self.fleet.processes.items() if name.endswith("-1") and p.alive()]
        for victim in victims:
            victim.send(signal.SIGKILL)
        self._note(f"server down: SIGKILL {', '.join(p.name for p in victims)}")
        self.pending.append((self.clock.now() + DOWN_FOR, lambda: self._server_up(victims)))

    def _server_up(self, victims: list[Process]) -> None:
        for victim in victims:
            if victim.popen is not None:
                victim.popen.wait(timeout=10)
            victim.start()
        self._note(f"server up: restarted {', '.join(p.name for p in victims)}")

    def _drain(self) -> None:
        """Let what started in the window finish while it makes progress (a killed or frozen
        execution never will), then stop every process."""
        if self.tool.startswith("celery"):
            self.fleet.stop(self.fleet.named("beat-"))
        unfinished = StrategyRun.objects.filter(strategy=self.tool, finished_at__isnull=True)

        def left() -> int:
            close_old_connections()
            return int(unfinished.count())

        try:
            wait_while_progressing(left, stall=self.clock.real_seconds(120), what="executions finishing")
        except TimeoutError as error:
            self._note(f"stop: {error}")

    def _schedule_djangoq(self) -> None:
        """The Schedule a team creates: the probe on cron, its next run the first tick."""
        from django_q.models import Schedule

        Schedule.objects.create(
            name="strategy-probe",
            func="bench.peers.alternatives_probe.djangoq_probe",
            schedule_type=Schedule.CRON,
            cron=f"* * * * * */{tick_seconds(self.plan.speed)}",
            next_run=datetime.fromtimestamp(self.clock.anchor, UTC),
            intended_date_kwarg="scheduled_for",
            repeats=-1,
        )


# --- Between cases, and what each tool can tell ------------------------------------------


def forget(tool: str) -> None:
    """The previous case's rows, queues and Redis keys (only Redis database 10's)."""
    import redis

    StrategyRun.objects.filter(strategy=tool).delete()
    redis.Redis.from_url(REDIS_URL).flushdb()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_q_schedule; DELETE FROM django_q_ormq; DELETE FROM django_q_task")
        cursor.execute(
            "TRUNCATE procrastinate_jobs, procrastinate_periodic_defers, procrastinate_events, "
            "procrastinate_workers CASCADE"
        )


def noticed(tool: str, missed: list[datetime], clock_environment: dict[str, str]) -> bool:
    """Whether the tool's own records show each missed tick: a procrastinate job left
    ``doing`` or failed (what its stalled-jobs query finds), a django-q2 task saved as
    failed. Celery beat keeps no record of what ran."""
    os.environ.update(clock_environment)  # simulated_at reads the deployment's clock
    found: set[datetime] = set()
    if tool == "procrastinate":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (args->>'timestamp')::bigint FROM procrastinate_jobs "
                "WHERE task_name = 'alternatives-probe' AND status IN ('doing', 'failed', 'aborted')"
            )
            found = {nearest_minute(simulated_at(row[0])) for row in cursor.fetchall()}
    elif tool == "django-q2":
        from django_q.models import Task

        for task in Task.objects.filter(success=False):
            at = (task.kwargs or {}).get("scheduled_for")
            if at:
                found.add(nearest_minute(simulated_at(datetime.fromisoformat(at).timestamp())))
    return set(missed) <= found


def run_tool(plan: StrategyPlan, tool: str, *, log_dir: Path, say: Callable[[str], None]) -> StrategyResult:
    say(f"{LABELS[tool]}: {plan.servers} servers, {plan.duration} from {plan.start:%Y-%m-%d %H:%M} UTC")
    forget(tool)
    deployment = PeerDeployment(plan, tool, log_dir=log_dir / tool, say=say)
    events = deployment.run()
    close_old_connections()
    result, missed = execution_counts(tool, LABELS[tool], plan)
    if missed:
        result.noticed = noticed(tool, missed, deployment.clock.environment())
    result.events = events
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=30, help="simulated minutes (at least 20 with faults)")
    parser.add_argument("--speed", type=float, default=10.0, help="simulated s per real s")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--faults", default="all", help="all, none, or a comma list of long-run, pause, server-down")
    parser.add_argument("--only", choices=CASES, action="append", help="these cases only (repeatable)")
    parser.add_argument("--log-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        tick_seconds(args.speed)
        faults = StrategyFault.parse_list(args.faults)
    except ValueError as error:
        parser.error(str(error))
    if faults and args.duration < 20:
        parser.error("--duration: the faults need at least 20 simulated minutes")
    if connection.vendor != "postgresql":
        parser.error("needs PostgreSQL (DATABASE_URL=postgres://...): procrastinate runs on it")
    plan = StrategyPlan(args.servers, 2, START, timedelta(minutes=args.duration), args.speed, faults)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tiffin-alternatives-"))

    def say(line: str) -> None:
        print(line, flush=True)

    each = args.duration * 60 / args.speed
    say(f"{len(args.only or CASES)} deployment(s), each about {each:.0f} s; logs in {log_dir}")
    for line in plan.fault_lines():
        say(f"  fault: {line}")
    results = []
    for case in args.only or CASES:
        if case == "claim":
            result = run_case(plan, StrategyCase(Strategy.CLAIM), log_dir=log_dir, boot=Boot(), say=say)
        else:
            result = run_tool(plan, case, log_dir=log_dir, say=say)
        results.append(result)
        say(f"  {result_line(result)}")
    print("\n".join(comparison_table(plan, results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
