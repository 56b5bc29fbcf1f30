"""The benchmarks' process guardian: whatever happens to a benchmark, its children die.

Every child a benchmark starts (``bench.common.spawn``) leads a process group of its own,
so one signal reaches it and everything it forks: django-q2's ``qcluster`` is a sentinel
with worker, monitor and pusher processes, and killing only the sentinel left them
running for half an hour, reparented to init. The benchmark stops each group itself on
the way out; this guardian covers the ways out that run no code, SIGKILL included.

    python -m bench.guardian          (started by bench.common, reading its stdin)

1. The benchmark process starts the guardian in a session of its own (a Ctrl-C on the
   terminal does not reach it) with a pipe on its stdin, and writes ``+<pgid>`` for each
   group it starts and ``-<pgid>`` for each it has stopped.
2. When the pipe closes (the benchmark exited, however: the kernel closes the write end
   of a dead process), the guardian sends SIGTERM to every group still registered.
3. It waits up to ``GRACE_SECONDS`` for them to go, then sends SIGKILL to what is left
   and waits for that too; then it exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable

from support.processes import group_members

# How long a group gets between SIGTERM and SIGKILL, here and in bench.common's
# group_stop: the project's worker stops its cluster cleanly in well under the default.
GRACE_SECONDS = float(os.environ.get("BENCH_STOP_GRACE_SECONDS", "30"))


def groups_signal(pgids: Iterable[int], signum: int) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)


def groups_stop(pgids: Iterable[int], grace: float = GRACE_SECONDS) -> list[int]:
    """SIGTERM each group, SIGKILL what is left after ``grace``; return the pids that
    outlived even that (none, unless a process is stuck in the kernel)."""
    alive = [pgid for pgid in pgids if group_members(pgid)]
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        groups_signal(alive, signum)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [pgid for pgid in alive if group_members(pgid)]
    return [pid for pgid in alive for pid in group_members(pgid)]


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    registered: set[int] = set()
    for line in sys.stdin:
        sign, pgid = line[:1], int(line[1:])
        (registered.add if sign == "+" else registered.discard)(pgid)
    groups_stop(sorted(registered))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
