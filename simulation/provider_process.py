"""Starting and stopping the provider sandbox (``python -m provider_sandbox``) as a real
process, and its control endpoints, for the tests, the simulations and the benchmarks.

The sandbox stands for a third party: nothing here imports it, it is only started, in a
process group of its own, and stopped with ``stop_group`` however the caller ends.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.processes import PROJECT_DIR, stop_group


@dataclass
class RunningSandbox:
    """One sandbox process: its base URL (``http://127.0.0.1:PORT``) and its controls."""

    url: str
    popen: subprocess.Popen[bytes]
    state_path: Path

    def control(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call a ``/_sandbox/...`` endpoint; its JSON answer."""
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    def arm_fault(
        self,
        mode: str,
        *,
        count: int | None = None,
        delay_ms: int | None = None,
        methods: tuple[str, ...] = (),
        then: bool = False,
    ) -> None:
        """Arm ``mode`` for the next ``count`` API requests (None: until ``clear_fault``);
        ``then``: behind the faults already armed, instead of replacing them."""
        payload: dict[str, Any] = {"mode": mode, "count": count, "methods": list(methods), "then": then}
        if delay_ms is not None:
            payload["delay_ms"] = delay_ms
        self.control("POST", "/_sandbox/faults", payload)

    def clear_fault(self) -> None:
        self.control("DELETE", "/_sandbox/faults")

    def state(self) -> dict[str, Any]:
        """Counts: transfers, amount_total, idempotency_keys, in_flight, clock, fault..."""
        return self.control("GET", "/_sandbox/state")

    def advance_clock(self, seconds: float) -> None:
        self.control("POST", "/_sandbox/clock", {"advance_seconds": seconds})

    def stop(self, *, grace: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL to the group after ``grace``; the exit code (None: killed)."""
        return stop_group(self.popen, grace=grace)


def start_sandbox(
    *,
    state_path: Path,
    port: int = 0,
    key_retention: float | None = None,
    latency_ms: int = 0,
    log_path: Path | None = None,
    timeout: float = 30.0,
) -> RunningSandbox:
    """Start a sandbox keeping its state in ``state_path``; return once it listens.
    Its stderr goes to ``log_path``, else to this process's stderr."""
    argv = [sys.executable, "-m", "provider_sandbox", "--port", str(port), "--state", str(state_path)]
    if key_retention is not None:
        argv += ["--key-retention", repr(key_retention)]
    if latency_ms:
        argv += ["--latency-ms", str(latency_ms)]
    log = log_path.open("ab") if log_path is not None else None
    try:
        popen = subprocess.Popen(
            argv,
            cwd=PROJECT_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,  # None: inherited
            start_new_session=True,  # its own process group, stopped as one
        )
    finally:
        if log is not None:
            log.close()
    try:
        line = _first_line(popen, timeout=timeout)
    except BaseException:
        stop_group(popen, grace=1.0)
        raise
    if not line.startswith("listening on "):
        stop_group(popen, grace=1.0)
        where = f"; see {log_path}" if log_path is not None else ""
        raise RuntimeError(f"the sandbox did not start (exit {popen.returncode}){where}")
    return RunningSandbox(url=line.removeprefix("listening on ").strip(), popen=popen, state_path=state_path)


def _first_line(popen: subprocess.Popen[bytes], *, timeout: float) -> str:
    """The first line the process prints, waiting for it at most ``timeout`` seconds."""
    assert popen.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([popen.stdout], [], [], 0.1)
        if ready:
            return popen.stdout.readline().decode()
        if popen.poll() is not None:
            return ""
    raise TimeoutError(f"the sandbox printed nothing within {timeout:g} s")


@contextmanager
def running_sandbox(
    *, state_path: Path, key_retention: float | None = None, latency_ms: int = 0, log_path: Path | None = None
) -> Iterator[RunningSandbox]:
    """A sandbox for the block, stopped however it ends."""
    sandbox = start_sandbox(
        state_path=state_path, key_retention=key_retention, latency_ms=latency_ms, log_path=log_path
    )
    try:
        yield sandbox
    finally:
        sandbox.stop()
