"""The multiprocess directory: emptied when the first process starts, kept while any lives.

Real processes (Django set up with metrics on), since the rule is about processes: each
holds a shared lock on the directory for its life, and only a process that starts alone
may delete what it finds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.processes import PROJECT_DIR

# Set Django up (the app's ready() prepares the directory), say so, then wait for stdin to close.
LIVE = "import django, sys; django.setup(); print('ready', flush=True); sys.stdin.read()"


def _start(directory: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "METRICS_ENABLED": "1",
        "METRICS_MULTIPROC_DIR": str(directory),
        "DATABASE_URL": "sqlite:///db/unused.sqlite3",  # never opened: setup reads no table
    }
    process = subprocess.Popen(
        [sys.executable, "-c", LIVE],
        cwd=PROJECT_DIR,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0


def test_the_first_process_empties_the_directory_and_a_later_one_keeps_the_files_of_the_dead(tmp_path: Path):
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"from a previous run")
    first = _start(directory)
    try:
        assert not (directory / "counter_999999.db").exists()
        assert (directory / f"counter_{first.pid}.db").exists()  # its series, declared at zero
        # A process that died while the first runs: its counts are part of the totals.
        (directory / "counter_888888.db").write_bytes(b"a dead worker's counts")
        _stop(_start(directory))
        assert (directory / "counter_888888.db").exists()
    finally:
        _stop(first)
    # Nothing alive any more: the next start begins from zero.
    last = _start(directory)
    try:
        assert not (directory / "counter_888888.db").exists()
        assert not (directory / f"counter_{first.pid}.db").exists()
    finally:
        _stop(last)
