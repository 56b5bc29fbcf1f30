"""Starting, signalling and stopping the processes of a simulated deployment.

One piece of code for ``manage.py simulate`` and the failure scenarios in
``tests/scenarios``: each process is ``manage.py <command>`` in its own session (so a
signal reaches the django-q2 cluster and the workers it forked), with the simulated
clock in its environment. Stopping is bounded: SIGTERM, a grace period, then SIGKILL
to the whole process group, so nothing outlives a simulation or a failed test.
``stop_group`` is that stop for any child leading a group of its own (PgBouncer, a
private redis-server or PostgreSQL, a benchmark's children), and ``sigterm_exits`` makes
a SIGTERM to the parent stop its children too. ``guarded_start`` goes one further for
the benchmarks: a guardian process (``support.guardian``) stops the group even when
the parent is SIGKILLed and runs none of its code.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # tiffin.clock imports Django's ORM: the chaos table and the guardian run without it
    from tiffin.clock import SimulatedClock

PROJECT_DIR = Path(__file__).resolve().parent.parent
# Variables a simulated process must not inherit from the caller's shell.
_CLOCK_VARIABLES = (
    "TIFFIN_CLOCK_START",
    "TIFFIN_CLOCK_ANCHOR",
    "TIFFIN_CLOCK_SPEED",
    "TIFFIN_CLOCK_SKEW",
    "TIFFIN_CLOCK_FILE",
)


@dataclass(frozen=True)
class Segment:
    """From real UNIX time ``anchor`` on, the clock shows ``start`` and runs ``speed`` times
    faster than real time (``tiffin.clock.ClockSegment``, without Django)."""

    start: datetime
    anchor: float
    speed: float

    def at(self, real: float) -> datetime:
        return self.start + timedelta(seconds=(real - self.anchor) * self.speed)


@dataclass(frozen=True)
class SimulatedTime:
    """The clock every process of one simulation shares: ``start`` at real time ``anchor``,
    running ``speed`` times faster than real time; then, with a clock ``file``, the later
    segments written there (``at_speed``: a governor slowing the clock while it runs)."""

    start: datetime
    anchor: float
    speed: float
    later: tuple[Segment, ...] = ()
    file: Path | None = None

    @classmethod
    def starting(cls, start: datetime, *, speed: float, lead: float = 0.0, file: Path | None = None) -> SimulatedTime:
        """A clock that shows ``start`` ``lead`` real seconds from now (time to boot processes);
        with ``file``, one whose speed ``at_speed`` can change (the file is emptied)."""
        clock = cls(start=start.astimezone(UTC), anchor=time.time() + lead, speed=speed, file=file)
        if file is not None:
            clock.write()
        return clock

    def segments(self) -> tuple[Segment, ...]:
        return (Segment(self.start, self.anchor, self.speed), *self.later)

    def segment(self, real: float | None = None) -> Segment:
        """The segment in force at real time ``real`` (default: now)."""
        real = time.time() if real is None else real
        first, *later = self.segments()
        return [first, *(s for s in later if s.anchor <= real)][-1]

    def at_speed(self, speed: float, *, lead: float) -> SimulatedTime:
        """This clock running at ``speed`` from ``lead`` real seconds on, continuing from the
        instant it shows then; written to the clock file, which every process reads again
        (well within ``lead``) before the change applies."""
        if self.file is None:
            raise ValueError("a clock without a file cannot change its speed")
        anchor = time.time() + lead
        changed = replace(self, later=(*self.later, Segment(self.segment(anchor).at(anchor), anchor, speed)))
        changed.write()
        return changed

    def write(self) -> None:
        if self.file is None:
            return
        rows = [[segment.start.isoformat(), segment.anchor, segment.speed] for segment in self.later]
        partial = self.file.with_name(self.file.name + ".tmp")
        partial.write_text(json.dumps(rows))
        partial.replace(self.file)  # at once: a reader sees the old list or the new one

    def current_speed(self) -> float:
        return self.segment().speed

    def clock(self, *, skew: float = 0.0) -> SimulatedClock:
        from tiffin.clock import ClockSegment, SimulatedClock

        later = tuple(ClockSegment(s.start, s.anchor, s.speed) for s in self.later)
        return SimulatedClock(start=self.start, anchor=self.anchor, speed=self.speed, skew=skew, later=later)

    def now(self) -> datetime:
        real = time.time()
        return self.segment(real).at(real)

    def real_time_at(self, instant: datetime) -> float:
        """The real UNIX time at which this clock shows ``instant`` (by the speeds known now)."""
        first, *later = self.segments()
        found = [first, *(s for s in later if s.start <= instant)][-1]
        return found.anchor + (instant - found.start).total_seconds() / found.speed

    def real_seconds(self, simulated_seconds: float) -> float:
        return simulated_seconds / self.current_speed()

    def environment(self, *, skew: float = 0.0) -> dict[str, str]:
        env = {
            "TIFFIN_CLOCK_START": self.start.isoformat(),
            "TIFFIN_CLOCK_ANCHOR": repr(self.anchor),
            "TIFFIN_CLOCK_SPEED": repr(self.speed),
            "TIFFIN_CLOCK_SKEW": repr(skew),
        }
        if self.file is not None:
            env["TIFFIN_CLOCK_FILE"] = str(self.file)
        return env

    def sleep_until(self, instant: datetime) -> None:
        delay = self.real_time_at(instant) - time.time()
        if delay > 0:
            time.sleep(delay)

    def after(self, **delta: float) -> datetime:
        return self.start + timedelta(**delta)


@dataclass
class Process:
    """One ``manage.py`` process of the fleet, restartable with the same command and environment."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    signals: list[str] = field(default_factory=list)
    # A process with a job of its own (order traffic for so many minutes) may end by
    # itself; exiting 0 is then its normal end, not a crash.
    may_finish: bool = False

    def start(self) -> None:
        self.signals = []  # what was sent to this incarnation
        # A restart appends to the log; a new simulation with the same log dir starts afresh.
        with self.log_path.open("ab" if self.starts else "wb") as log:
            log.write(f"--- start {self.starts + 1}: {' '.join(self.argv[1:])}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=PROJECT_DIR,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach its children
            )
        self.starts += 1

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def send(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process and everything it forked (its process group)."""
        self.signals.append(sig.name)
        signal_group(self.pid, sig)

    def request_stop(self) -> None:
        """Ask for a clean stop: SIGCONT to the group (in case it is paused), SIGTERM to the
        leader only. The leader stops what it started (django-q2 stops its own children); a
        SIGTERM to every child at once would make the cluster's sentinel respawn workers."""
        self.signals.append("stop")
        signal_group(self.pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` (a django-q2 worker, say) belongs to this process's group."""
        try:
            return self.popen is not None and os.getpgid(pid) == self.popen.pid
        except ProcessLookupError:
            return False

    def stop(self, *, grace: float) -> int | None:
        """Request a clean stop, wait ``grace`` seconds, then SIGKILL the group.
        Returns the exit code (None if it had to be killed)."""
        if self.popen is None:
            return None
        if self.alive():
            self.request_stop()
        return stop_group(self.popen, grace=grace, sig=None)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to every process of group ``pgid``; nothing if the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, sig)


# How long the processes of a group may take to go after SIGKILL.
KILL_WAIT_SECONDS = 5.0


def stop_group(
    popen: subprocess.Popen[Any],
    *,
    grace: float,
    sig: signal.Signals | None = signal.SIGTERM,
    leader_only: bool = False,
) -> int | None:
    """Stop the process group ``popen`` leads (a child started with ``start_new_session``):
    ``sig`` to the whole group (to the leader alone with ``leader_only``, for one that stops
    its own children; None: it was asked already), up to ``grace`` seconds for the group to
    go, then SIGKILL to the group, whose forked processes may outlive their leader; the
    leader is reaped and the rest waited for (``KILL_WAIT_SECONDS``). The one way every
    child server here is stopped. Returns the leader's exit code, None if it had to be killed.
    """
    pgid = popen.pid
    if popen.poll() is None:
        deadline = time.monotonic() + grace
        if sig is not None and leader_only:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(sig)
        elif sig is not None:
            signal_group(pgid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=grace)
        _wait_group_gone(pgid, deadline)  # the leader went: what it forked gets the rest of the grace
    code = popen.poll()
    signal_group(pgid, signal.SIGKILL)
    popen.wait(timeout=KILL_WAIT_SECONDS)
    _wait_group_gone(pgid, time.monotonic() + KILL_WAIT_SECONDS)
    return code


@contextlib.contextmanager
def in_group(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    grace: float,
    stdout: IO[bytes] | int = subprocess.DEVNULL,
    stderr: IO[bytes] | int = subprocess.DEVNULL,
) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` running from the project directory for the block, leading a process group of
    its own with no stdin, its output to the files ``stdout`` and ``stderr`` (no pipe to
    drain while it stops; none by default). However the block ends (the child's end, an
    exception such as the SystemExit ``sigterm_exits`` makes of a SIGTERM), the group is
    stopped (``stop_group`` with ``grace``)."""
    process = subprocess.Popen(
        list(args),
        env=dict(env),
        cwd=PROJECT_DIR,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        stop_group(process, grace=grace)


def run_in_group(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: IO[bytes],
    stderr: IO[bytes],
    grace: float,
    timeout: float | None = None,
) -> int:
    """``args`` run to its end ``in_group``, or until ``timeout`` (TimeoutExpired); its exit code."""
    with in_group(args, env=env, grace=grace, stdout=stdout, stderr=stderr) as process:
        return process.wait(timeout=timeout)


def proc_stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: [0] the state, [1] the
    parent, [2] the process group, [11:15] CPU times; [] once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    return [pid for pid in _pids() if (fields := proc_stat(pid)) and int(fields[2]) == pgid and fields[0] != "Z"]


def descendants(pid: int) -> list[int]:
    """Every process ``pid`` forked, and they forked, and so on (zombies included)."""
    parents = {child: int(fields[1]) for child in _pids() if (fields := proc_stat(child))}
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def groups_below(pid: int) -> set[int]:
    """The process groups of ``pid`` and of every process descending from it."""
    return {int(fields[2]) for p in [pid, *descendants(pid)] if (fields := proc_stat(p))}


def stop_tree(popen: subprocess.Popen[Any], groups: Iterable[int], *, grace: float) -> None:
    """The end of a test that signalled a process tree: ``popen``'s group stopped
    (``stop_group``), then SIGKILL to ``groups`` (noted while it ran) and to the groups
    still below it, whatever the tree left behind."""
    left = set(groups) | groups_below(popen.pid)
    stop_group(popen, grace=grace)
    for group in left:
        signal_group(group, signal.SIGKILL)


def _wait_group_gone(pgid: int, deadline: float) -> None:
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def groups_stop(pgids: Iterable[int], *, grace: float) -> list[int]:
    """``stop_group`` for groups this process did not start (so cannot wait for): SIGTERM
    to each, SIGKILL to what is left after ``grace``, up to ``KILL_WAIT_SECONDS`` for that;
    return the pids that outlived even that (none, unless a process is stuck in the kernel)."""
    alive = [pgid for pgid in pgids if group_members(pgid)]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT_SECONDS)):
        for pgid in alive:
            signal_group(pgid, sig)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [pgid for pgid in alive if group_members(pgid)]
    return [pid for pgid in alive for pid in group_members(pgid)]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of ``pid`` and every process it forked, alive or reaped
    (0 for one gone). Unlike a wall-clock figure it hardly moves when other work shares the
    machine, so it compares the cost of two designs even on a busy host."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = [proc_stat(one) for one in [pid, *descendants(pid)]]
    return sum(int(fields[i]) for fields in stats if fields for i in (11, 12, 13, 14)) / ticks


# --- Guarded children: stopped however the parent ends -------------------------------------

# How long a guarded group gets between SIGTERM and SIGKILL, from guarded_stop and from the
# guardian. The benchmarks are its users: their worker stops its cluster well within it.
GUARD_GRACE_SECONDS = float(os.environ.get("BENCH_STOP_GRACE_SECONDS", "30"))

_GUARDIAN: list[subprocess.Popen[bytes]] = []


def _guardian_tell(line: str) -> None:
    """Write ``line`` to this process's guardian (``support.guardian``), started on first use."""
    if not _GUARDIAN or _GUARDIAN[0].poll() is not None:
        _GUARDIAN[:] = [
            subprocess.Popen(
                [sys.executable, "-m", "support.guardian"],
                cwd=PROJECT_DIR,
                env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)},
                stdin=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C on the terminal does not reach it
            )
        ]
    stdin = _GUARDIAN[0].stdin
    assert stdin is not None
    stdin.write(f"{line}\n".encode())
    stdin.flush()


def guard(pgid: int, *, release: bool = False) -> None:
    """Register with the guardian a process group this process started without
    ``guarded_start`` (a throwaway PostgreSQL's postmaster), or ``release`` it once stopped:
    if this process dies without running its ``finally`` blocks, the guardian stops the group."""
    _guardian_tell(f"{'-' if release else '+'}{pgid}")


def guarded_start(args: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``args`` leading a process group of its own, registered with the guardian, so
    it and everything it forks stop with this process (``guarded_stop``), however it ends."""
    process = subprocess.Popen(list(args), start_new_session=True, **popen)
    guard(process.pid)
    return process


def guarded_stop(process: subprocess.Popen[bytes], *, grace: float = GUARD_GRACE_SECONDS) -> int:
    """Stop ``process`` and its whole group as ``stop_group`` does (SIGTERM to the group,
    SIGKILL after ``grace``), fail if any of it outlived that, release it from the guardian.
    Returns its exit code."""
    stop_group(process, grace=grace)
    left = group_members(process.pid)
    if left:
        raise RuntimeError(f"processes {left} of group {process.pid} outlived SIGKILL")
    guard(process.pid, release=True)
    return process.returncode


def guarded_run(args: Sequence[str], **popen: Any) -> int:
    """``subprocess.run(args, check=False)`` as a guarded child: stopped with this process
    if it is interrupted. Returns the exit code."""
    process = guarded_start(args, **popen)
    try:
        process.wait()
    finally:
        guarded_stop(process)
    return process.returncode


def _exit_status(signum: int) -> BaseException:
    return SystemExit(128 + signum)


@contextlib.contextmanager
def sigterm_exits(
    signals: Sequence[signal.Signals] = (signal.SIGTERM,),
    exception: Callable[[int], BaseException] = _exit_status,
) -> Iterator[None]:
    """While the block runs, each of ``signals`` (SIGTERM unless told) raises
    ``exception(signum)``, ``SystemExit(128 + signum)`` unless told, the way Ctrl-C raises
    KeyboardInterrupt, so the ``finally`` blocks and context managers that stop child
    processes run before the process goes (SIGTERM's default ends it at once and leaves
    its children running). A second signal while they run is let pass; SIGKILL remains.
    A signal ignored when the block starts stays ignored (``nohup``'s SIGHUP). The
    previous handlers are back afterwards. Outside the main thread it does nothing.
    The test session takes SIGTERM and SIGHUP this way too (``tests/conftest.py``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def exit_once(signum: int, frame: object) -> None:
        if not received:
            received.append(signum)
            raise exception(signum)

    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, exit_once)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Fleet:
    """The processes of one simulation. A context manager: leaving it stops them all."""

    def __init__(self, *, environment: Mapping[str, str], log_dir: Path, grace: float = 10.0) -> None:
        self.environment = _base_environment(environment)
        self.log_dir = log_dir
        self.grace = grace
        self.processes: dict[str, Process] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self, name: str, command: list[str], *, env: Mapping[str, str] | None = None, may_finish: bool = False
    ) -> Process:
        """Start ``manage.py <command>`` as ``name`` with the fleet's environment plus ``env``;
        ``may_finish``: the process ends by itself when its work is done (see ``crashed``)."""
        if name in self.processes and self.processes[name].alive():
            raise ValueError(f"{name} is already running")
        process = Process(
            name=name,
            argv=[sys.executable, str(PROJECT_DIR / "manage.py"), *command],
            # PGAPPNAME: its connections carry its name (pg_stat_activity.application_name).
            env={**self.environment, "PGAPPNAME": name, **(env or {})},
            log_path=self.log_dir / f"{name}.log",
            may_finish=may_finish,
        )
        self.processes[name] = process
        process.start()
        return process

    def restart(self, name: str) -> Process:
        process = self.processes[name]
        if process.alive():
            raise ValueError(f"{name} is still running")
        process.start()
        return process

    def __getitem__(self, name: str) -> Process:
        return self.processes[name]

    def named(self, prefix: str) -> list[Process]:
        return [process for name, process in self.processes.items() if name.startswith(prefix)]

    def owner_of(self, pid: int) -> Process | None:
        return next((process for process in self.processes.values() if process.owns(pid)), None)

    def stop(self, processes: list[Process]) -> dict[str, int | None]:
        """Stop ``processes`` together: all get SIGTERM first, so they shut down in parallel."""
        for process in processes:
            if process.alive():
                process.request_stop()
        return {process.name: process.stop(grace=self.grace) for process in processes}

    def stop_all(self) -> dict[str, int | None]:
        return self.stop(list(self.processes.values()))

    def crashed(self) -> list[Process]:
        """Processes that exited although nobody signalled them or asked them to stop, except
        one that may finish and exited 0 (its work was done)."""
        return [
            p
            for p in self.processes.values()
            if p.popen is not None
            and not p.alive()
            and not p.signals
            and not (p.may_finish and p.popen.returncode == 0)
        ]

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"===== {p.name} ({p.log_path})\n{p.log_tail(lines)}" for p in self.processes.values())

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop_all()


def _base_environment(extra: Mapping[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in _CLOCK_VARIABLES}
    env.update({"PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "tiffin.settings"})
    env.update(extra)
    return env


def wait_for(condition: Callable[[], bool], *, timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; TimeoutError naming ``what`` after ``timeout`` real seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)


def wait_while_progressing(
    left: Callable[[], int], *, stall: float, interval: float = 0.2, what: str = "the work left"
) -> None:
    """Poll ``left`` (how much work the system still has to do, read from its records)
    until it is 0; TimeoutError naming ``what`` once ``stall`` real seconds pass without
    ``left`` falling below the lowest value it has shown. A busy machine gets as long as
    it keeps making progress; a stuck system fails ``stall`` seconds after its last step,
    however much was left."""
    lowest = left()
    progressed_at = time.monotonic()
    while lowest > 0:
        if time.monotonic() - progressed_at > stall:
            raise TimeoutError(f"{what}: {lowest} left, and no progress for {stall:g} s")
        time.sleep(interval)
        now_left = left()
        if now_left < lowest:
            lowest, progressed_at = now_left, time.monotonic()
