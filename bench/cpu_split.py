"""Where a benchmark's CPU goes: every process's CPU seconds from /proc, summed by kind.

Run it beside a benchmark (Linux only); every ``--interval`` seconds it prints the cores
each kind of process used over the interval, until ``--seconds`` have passed:

    python -m bench.cpu_split --interval 10 --seconds 600 &
    python -m bench.cancellations --only project --rates 1000,1200

Kinds: the benchmark's placers (``--placer``), PostgreSQL's backends, the project's worker
(``manage.py worker`` and its django-q2 processes), the raw pipeline's canceller, other
Python processes, everything else. BENCHMARKS.md ("Where the limit of this machine is")
quotes its figures for benchmark 3.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def kind_of(command: str) -> str:
    if "--placer" in command:
        return "placers"
    if "--raw-worker" in command:
        return "raw canceller"
    if "manage.py worker" in command or "qcluster" in command:
        return "worker"
    if command.startswith("postgres"):
        return "postgres"
    return "other python" if "python" in command else "other"


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (kind, user + system CPU seconds so far)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        found[int(entry.name)] = (kind_of(command), (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=10.0, help="seconds per line")
    parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    args = parser.parse_args()
    if args.interval <= 0 or args.seconds <= 0:
        parser.error("--interval and --seconds must be positive")
    before, stop = cpu_by_process(), time.monotonic() + args.seconds
    while time.monotonic() < stop:
        time.sleep(args.interval)
        now = cpu_by_process()
        cores: dict[str, float] = {}
        for pid, (kind, seconds) in now.items():
            cores[kind] = cores.get(kind, 0.0) + (seconds - before.get(pid, (kind, 0.0))[1]) / args.interval
        before = now
        line = "  ".join(f"{kind} {value:.2f}" for kind, value in sorted(cores.items()) if value >= 0.01)
        print(f"{time.strftime('%H:%M:%S')}  cores: {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
