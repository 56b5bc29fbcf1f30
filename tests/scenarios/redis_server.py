"""A Redis for the strategy scenarios: the one at REDIS_URL (default
redis://127.0.0.1:6379/0) when it answers, else a private ``redis-server`` on a free
port, without persistence, stopped afterwards. Without either the scenario skips with
the reason, except in CI, where it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from support.ports import free_port
from support.processes import stop_group, wait_for

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping())
    except redis.RedisError:
        return False


@contextmanager
def redis_for_scenarios() -> Iterator[str]:
    """Yield the URL of a Redis that answers (see the module doc)."""
    url = os.environ.get("REDIS_URL") or DEFAULT_URL
    if _answers(url):
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        message = f"Redis at {url} does not answer and redis-server is not installed (make scenario-deps as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="tiffin-redis-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(
        [*command, "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    own = f"redis://127.0.0.1:{port}/0"
    try:
        wait_for(lambda: _answers(own), timeout=15, what="redis-server answering")
        yield own
    finally:
        stop_group(process, grace=10)
        shutil.rmtree(workdir, ignore_errors=True)
