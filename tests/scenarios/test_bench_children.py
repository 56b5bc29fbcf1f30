"""Benchmark children never outlive the benchmark, however it ends.

A stand-in for a benchmark starts one child the way the benchmarks do
(``bench.common.child_start``); the child forks a grandchild that ignores SIGTERM, as
django-q2's cluster forks its workers. The stand-in is then killed (SIGKILL runs none of
its code; SIGTERM and SIGINT do) and nothing of the child's group may be left once the
guardian's grace and its SIGKILL wait are over.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.common import ROOT
from support.processes import group_members, proc_stat
from tests.scenarios.harness import HANG_GUARD_SECONDS

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

GRACE_SECONDS = 1.0
# The stand-in writes its child's group id to a file; the test reads the members from /proc.
# It takes SIGINT as a benchmark in a terminal does (KeyboardInterrupt): a suite started in
# the background of a non-interactive shell (nohup, a CI script's `&`) inherits SIGINT
# ignored, and Python keeps an ignored SIGINT ignored.
PARENT = """
import json, os, signal, sys, time
from pathlib import Path
from bench.common import PYTHON, child_start, children
signal.signal(signal.SIGINT, signal.default_int_handler)

GRANDCHILD = (
    "import os, signal, sys, time\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "if os.fork() == 0:\\n"
    "    time.sleep(600)\\n"
    "    sys.exit()\\n"
    "time.sleep(600)\\n"
)
out = Path(sys.argv[1])
with children("guardian-test") as (started, logs):
    started.append(child_start("child", [PYTHON, "-c", GRANDCHILD], env=dict(os.environ), logs=logs))
    out.write_text(json.dumps({"pgid": started[0].popen.pid}))
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    fields = proc_stat(pid)
    return bool(fields) and fields[0] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_it_leaves_no_child_when_the_benchmark_is_killed(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "pids.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_STOP_GRACE_SECONDS": str(GRACE_SECONDS)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(out)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out.exists() and len(_members(out)) >= 2):
            time.sleep(0.05)
        members = _members(out)
        assert len(members) >= 2, "the child and its grandchild should be running before the kill"
        parent.send_signal(signum)
        parent.wait(GRACE_SECONDS + 5 + 30)
        # The child's group gets SIGTERM, GRACE_SECONDS, then SIGKILL and up to 5 s for it
        # (support.processes.groups_stop); the child ignores SIGTERM, so it takes all of it.
        # Waiting for the stand-in above already took the grace when it stops its own.
        deadline = time.monotonic() + GRACE_SECONDS + 5 + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in members):
            time.sleep(0.05)
        assert [pid for pid in members if _alive(pid)] == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _members(out: Path) -> list[int]:
    if not out.exists() or not out.read_text():
        return []
    return group_members(json.loads(out.read_text())["pgid"])
