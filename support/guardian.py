"""The guardian: whatever happens to the process that started them, its guarded children die.

Every guarded child (``support.processes.guarded_start``, each child a benchmark starts)
leads a process group of its own, so one signal reaches it and everything it forks:
django-q2's ``qcluster`` is a sentinel with worker, monitor and pusher processes, and
killing only the sentinel left them running for half an hour, reparented to init. The
parent stops each group itself on the way out; this guardian covers the ways out that run
no code, SIGKILL included.

    python -m support.guardian          (started by support.processes, reading its stdin)

1. The parent starts the guardian in a session of its own (a Ctrl-C on the terminal does
   not reach it) with a pipe on its stdin, and writes ``+<pgid>`` for each group it starts
   and ``-<pgid>`` for each it has stopped.
2. When the pipe closes (the parent exited, however: the kernel closes the write end of a
   dead process), the guardian sends SIGTERM to every group still registered.
3. It waits up to ``GUARD_GRACE_SECONDS`` for them to go, then sends SIGKILL to what is
   left and waits for that too; then it exits.
"""

from __future__ import annotations

import signal
import sys

from support.processes import GUARD_GRACE_SECONDS, groups_stop


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    registered: set[int] = set()
    for line in sys.stdin:
        sign, pgid = line[:1], int(line[1:])
        (registered.add if sign == "+" else registered.discard)(pgid)
    groups_stop(sorted(registered), grace=GUARD_GRACE_SECONDS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
