"""``python -m simulation.chaos_table``: ``simulate --chaos`` for a list of seeds, one
after another against ``DATABASE_URL``, and a table of what each did: the faults it
injected by kind, whether every invariant held, how long it took. A seed that broke an
invariant prints the command that replays it. Exits 1 if any seed failed (with
``--expect-failures``, for a deliberately broken build, it reports how many were caught).

Every seed starts from the same seeded history (``seed_demo --reset``) and the same
simulated start, so a seed's schedule is the same in every run of the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.processes import PROJECT_DIR, run_in_group, sigterm_exits

BREAK_VARIABLE = "TIFFIN_SIMULATE_BREAK"  # simulation.probe_jobs.BREAK_VARIABLE
# How long a seed's simulate gets to stop its servers (Fleet's grace is 10 s) on SIGTERM.
STOP_GRACE_SECONDS = 60.0
# Column headings for simulation.chaos.ChaosKind's values, in its order (this module runs
# without Django, so it names them rather than importing them).
_SHORT = {
    "worker-kill": "kill",
    "worker-kill-mid-payout": "payout",
    "worker-pause": "pause",
    "scheduler-kill": "sched",
    "db-terminate": "dbterm",
    "clock-skew": "skew",
    "server-join": "join",
    "server-leave": "leave",
    "provider-commit-then-timeout": "pv-tmo",
    "provider-commit-then-500": "pv-500",
    "provider-down": "pv-down",
    "sender-kill-before-local-commit": "sender",
    "leader-kill": "leader",
}


@dataclass
class SeedResult:
    seed: int
    ok: bool
    seconds: float
    by_kind: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # The clock's effective speed (the governor slows it while the processes lag it).
    speed: float | None = None

    def row(self) -> str:
        counts = "".join(f"{self.by_kind.get(kind, 0):>8}" for kind in _SHORT)
        held = "yes" if self.ok else f"NO ({len(self.problems)})"
        speed = f"{self.speed:>7.0f}x" if self.speed is not None else f"{'-':>8}"
        return f"{self.seed:>6}{counts}  {held:<12}{self.seconds:>7.0f} s{speed}"


def parse_seeds(text: str) -> list[int]:
    """'1-20', '3,7,9' or '1-5,11'."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds += range(int(low), int(high or low) + 1)
    if not seeds:
        raise ValueError(f"{text!r}: no seeds")
    return seeds


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m simulation.chaos_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-20", help="seeds, e.g. 1-20 or 3,7,9 (default 1-20)")
    parser.add_argument("--duration", default="1h", help="simulated time per seed (default 1h)")
    parser.add_argument("--speed", default="60", help="simulated seconds per real second (default 60)")
    parser.add_argument("--servers", default="3", help="servers at the start (default 3)")
    parser.add_argument("--start", default="2027-03-07T20:00:00+00:00", help="simulated start (a Sunday 20:00 UTC)")
    parser.add_argument("--chaos-rate", default="16", help="faults per simulated hour (default 16)")
    parser.add_argument(
        "--pooler", action="store_true", help="every seed's processes behind a private PgBouncer in transaction mode"
    )
    parser.add_argument("--break", dest="broken", default="", help="run a deliberately broken build (probe_jobs)")
    parser.add_argument("--expect-failures", action="store_true", help="a broken build: count the seeds that caught it")
    parser.add_argument("--log-dir", default="db/chaos-logs", help="each seed's process logs (default db/chaos-logs)")
    options = parser.parse_args(argv)
    try:
        options.seed_list = parse_seeds(options.seeds)
    except ValueError as error:
        parser.error(str(error))
    return options


def _commands(options: argparse.Namespace, seed: int) -> list[list[str]]:
    # The previous seed's simulation paid weeks: the development reset deletes them with their orders.
    seed_demo = ["seed_demo", "--reset", "--delete-payouts", "--restaurants", "9", "--weeks", "3"]
    seed_demo += ["--now", options.start]
    simulate = ["simulate", "--reset", "--chaos", str(seed), "--start", options.start, "--duration", options.duration]
    simulate += ["--speed", options.speed, "--servers", options.servers, "--chaos-rate", options.chaos_rate]
    simulate += ["--pooler"] if options.pooler else []
    return [seed_demo, simulate]


def replay_command(options: argparse.Namespace, seed: int) -> str:
    env = f"DATABASE_URL={shlex.quote(os.environ.get('DATABASE_URL', ''))} "
    env += f"{BREAK_VARIABLE}={shlex.quote(options.broken)} " if options.broken else ""
    return " && ".join(f"{env}python manage.py {shlex.join(command)}" for command in _commands(options, seed))


def run_seed(options: argparse.Namespace, seed: int) -> SeedResult:
    env = {**os.environ, **({BREAK_VARIABLE: options.broken} if options.broken else {})}
    manage = [sys.executable, str(PROJECT_DIR / "manage.py")]
    seed_demo, simulate = _commands(options, seed)
    log_dir = Path(options.log_dir) / f"seed-{seed}"
    log_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    seeded = _run([*manage, *seed_demo], env=env, stdout=log_dir / "seed_demo.out", stderr=log_dir / "seed_demo.err")
    if seeded:
        raise SystemExit(f"seed {seed}: seed_demo exited {seeded}; see {log_dir / 'seed_demo.err'}")
    out, err = log_dir / "simulate.json", log_dir / "simulate.err"
    code = _run([*manage, *simulate, "--json", "--log-dir", str(log_dir)], env=env, stdout=out, stderr=err)
    seconds = time.monotonic() - began
    stderr = err.read_text(errors="replace")
    try:
        report: dict[str, Any] = json.loads(out.read_text())
    except json.JSONDecodeError:
        return SeedResult(seed, ok=False, seconds=seconds, problems=[f"no report: {stderr[-500:]}"])
    ok = code == 0 and report["ok"]
    return SeedResult(
        seed,
        ok=ok,
        seconds=seconds,
        by_kind=report["chaos"]["injected_by_kind"],
        problems=report["problems"],
        speed=report.get("clock", {}).get("effective_speed"),
    )


def _run(command: list[str], *, env: dict[str, str], stdout: Path, stderr: Path) -> int:
    """Run ``command`` to its end in a process group of its own, its output to files (no
    pipe to drain while it stops); however this process is stopped (SIGTERM, Ctrl-C), the
    group is stopped first: simulate stops its servers on SIGTERM within
    ``STOP_GRACE_SECONDS``."""
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return run_in_group(command, env=env, stdout=out, stderr=err, grace=STOP_GRACE_SECONDS)


def main(argv: list[str] | None = None) -> int:
    options = _arguments(argv)
    with sigterm_exits():  # SIGTERM (make chaos stopped) stops the running seed's processes
        return _table(options)


def _table(options: argparse.Namespace) -> int:
    build = f" (broken build: {BREAK_VARIABLE}={options.broken})" if options.broken else ""
    seeds = len(options.seed_list)
    pooler = "on: every process behind PgBouncer (transaction mode)" if options.pooler else "off"
    print(
        f"chaos: {seeds} seeds x {options.duration} at {options.speed}x, {options.servers} servers, "
        f"{options.chaos_rate} faults per simulated hour{build}; pooler {pooler}"
    )
    kinds = "".join(f"{name:>8}" for name in _SHORT.values())
    print(f"{'seed':>6}{kinds}  {'invariants':<12}{'real':>9}{'speed':>8}")
    results = []
    for seed in options.seed_list:
        result = run_seed(options, seed)
        results.append(result)
        print(result.row(), flush=True)
    return _summary(options, results)


def _summary(options: argparse.Namespace, results: list[SeedResult]) -> int:
    total: Counter[str] = Counter()
    for result in results:
        total.update(result.by_kind)
    print(f"{'total':>6}" + "".join(f"{total[kind]:>8}" for kind in _SHORT))
    failed = [result for result in results if not result.ok]
    pooler = " behind PgBouncer" if options.pooler else ""
    print(f"every invariant held in {len(results) - len(failed)} of {len(results)} seeds{pooler}")
    for result in failed:
        print(f"seed {result.seed} broke: {'; '.join(result.problems[:3])}")
        print(f"  replay: {replay_command(options, result.seed)}")
    if options.expect_failures:
        print(f"the broken build was caught by {len(failed)} of {len(results)} seeds")
        return 0 if failed else 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
