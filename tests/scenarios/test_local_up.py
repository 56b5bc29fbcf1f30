"""``make up`` (deploy/local-up.sh) run for real, in a session of its own on a SQLite file:
a request Django logs (a 404) is written once, to the web log, not to the terminal; and
Ctrl-C (SIGINT to the terminal's process group), or SIGTERM to the group with make's own
passed on, stops gunicorn and the worker promptly and cleanly: no worker of gunicorn is
killed, no process is left, and the script says "Stopped." once they have."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from support.ports import free_port
from support.processes import PROJECT_DIR, descendants, proc_stat, wait_for
from tests.scenarios.harness import HANG_GUARD_SECONDS

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

# Ctrl-C to every process gone: two or three seconds when idle; gunicorn gives a request
# in flight WEB_GRACEFUL_TIMEOUT_SECONDS (5 in make up) before it kills a worker.
PROMPT_SECONDS = 15


def _environment(tmp_path: Path, port: int) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DEBUG", "SECRET_KEY")}
    return environment | {
        "PORT": str(port),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'tiffin.sqlite3'}",
        "LOG_DIR": str(tmp_path / "logs"),
        "VENV_BIN": str(Path(sys.executable).parent),
        "Q_WORKERS": "1",
        "WEB_CONCURRENCY": "2",
    }


# Ctrl-C: SIGINT to the terminal's process group. SIGTERM to the group, as a process
# manager or `kill -- -PGID` sends it, then once more to the script, as make passes its own on.
STOPS = {"ctrl-c": [signal.SIGINT], "sigterm-through-make": [signal.SIGTERM, signal.SIGTERM]}


@pytest.mark.parametrize("stop", STOPS, ids=str)
def test_make_up_logs_a_404_once_and_ctrl_c_stops_both_promptly(tmp_path: Path, stop: str) -> None:
    port = free_port()
    terminal = tmp_path / "terminal.log"
    web_log = tmp_path / "logs" / "web.log"
    with terminal.open("wb") as out:
        up = subprocess.Popen(
            ["bash", str(PROJECT_DIR / "deploy" / "local-up.sh")],
            cwd=PROJECT_DIR, env=_environment(tmp_path, port), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_interruptible,
        )  # fmt: skip
    started: list[int] = []
    try:
        wait_for(
            lambda: up.poll() is not None or "Ctrl-C stops" in terminal.read_text(),
            timeout=180,
            interval=0.2,
            what="make up to print its addresses",
        )
        assert up.poll() is None, terminal.read_text()
        started = descendants(up.pid)

        path = f"/no-such-page-{uuid.uuid4().hex[:8]}"
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30)
        assert answer.value.code == 404
        # gunicorn writes the access line after the response, Django's warning before it.
        wait_for(lambda: f'"GET {path} HTTP/1.1" 404' in web_log.read_text(), timeout=30, what="the access line")
        assert web_log.read_text().count(f"Not Found: {path}") == 1, web_log.read_text()[-2000:]
        assert path not in terminal.read_text()

        asked = time.monotonic()
        first, *again = STOPS[stop]
        os.killpg(up.pid, first)
        for signum in again:  # while the script waits for the servers: two at once would merge into one
            wait_for(lambda: "Stopping the web server" in terminal.read_text(), timeout=60, what="the stop to begin")
            os.kill(up.pid, signum)
        try:
            up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            logs = {name: (tmp_path / "logs" / name).read_text()[-2000:] for name in ("worker.log", "web.log")}
            pytest.fail(f"make up still runs 120 s after {stop}: {logs}")
        wait_for(lambda: not _alive(started), timeout=120, what="every process make up started to end")
        took = time.monotonic() - asked
    finally:
        for pid in [up.pid, *started]:
            if proc_stat(pid):
                os.kill(pid, signal.SIGKILL)
        up.wait(timeout=30)
    log = web_log.read_text()
    assert took < PROMPT_SECONDS, f"{stop} took {took:.1f} s"
    assert "SIGKILL" not in log and "Shutting down: Master" in log, log[-2000:]
    assert "Stopped." in terminal.read_text()


def _interruptible() -> None:
    """SIGINT as a terminal gives it: a test run started in the background of a
    non-interactive shell inherits it ignored, and bash cannot trap an ignored signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pids: list[int]) -> bool:
    return any((fields := proc_stat(pid)) and fields[0] != "Z" for pid in pids)
