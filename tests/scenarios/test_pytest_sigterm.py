"""SIGTERM or SIGHUP to pytest itself (a CI timeout, a supervisor, ``kill``, a closed
terminal) stops every process its tests started and drops their databases, as Ctrl-C does.

A pytest runs ``held_by_pytest.py`` in a session of its own on this server; that test
starts a scheduler on a scenario database and holds it. Once the scheduler has made a
pass, the test notes every process group at or below that pytest, signals the pytest
alone and requires that it exits by itself (128 + the signal, not killed by it) with no
process of those groups left and neither its scenario database nor its template left on
the server. Without ``tests/conftest.py``'s handler the signal ends the interpreter at
once: the scheduler's group and both databases stay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import PROJECT_DIR, group_members, groups_below, stop_tree, wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS, PostgresServer

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

HELD = Path(__file__).with_name("held_by_pytest.py")


def _databases_of(server: PostgresServer, pid: int) -> list[str]:
    """The databases the scenarios' harness made in process ``pid`` (named ``..._<pid>``)."""
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'tiffin_scn_%%' AND datname LIKE %s",
            (f"%\\_{pid}",),
        ).fetchall()
    return sorted(name for (name,) in rows)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_pytest_stops_what_its_tests_started(
    pg_server: PostgresServer, tmp_path: Path, signum: signal.Signals
) -> None:
    marker = tmp_path / "held.json"
    argv = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "scenario"),
        *("--basetemp", str(tmp_path / "inner"), str(HELD)),
    ]
    out = (tmp_path / "out.log").open("wb")
    inner = subprocess.Popen(
        argv, cwd=PROJECT_DIR, env={**os.environ, "HELD_MARKER": str(marker)}, stdout=out,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    groups: set[int] = set()
    try:
        wait_for(
            lambda: inner.poll() is not None or marker.exists(),
            timeout=300,
            interval=0.25,
            what="the held scheduler's first pass",
        )
        assert inner.poll() is None, (tmp_path / "out.log").read_text()[-3000:]
        held = json.loads(marker.read_text())
        groups = groups_below(inner.pid)
        assert {inner.pid, held["scheduler"]} <= groups
        assert held["database"] in _databases_of(pg_server, inner.pid)
        inner.send_signal(signum)
        inner.wait(timeout=90)
        wait_for(lambda: not any(map(group_members, groups)), timeout=10, what="every group gone")
        assert inner.returncode == 128 + signum, (tmp_path / "out.log").read_text()[-3000:]
        assert _databases_of(pg_server, inner.pid) == []
    finally:
        out.close()
        stop_tree(inner, groups, grace=5)
        for name in _databases_of(pg_server, inner.pid):
            pg_server.drop_database(name)
