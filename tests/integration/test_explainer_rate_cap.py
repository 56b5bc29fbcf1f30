"""The public cron explainer's rate cap holds across processes and behind a proxy: two
real gunicorn workers against the test database share one count per client, a trusted
proxy's visitors each get their own, and X-Forwarded-For from anyone else is ignored."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection

from support.ports import free_port
from support.processes import PROJECT_DIR, stop_group, wait_for

# The test database is created for tests marked django_db only; the workers use it. No
# transaction around each test: on SQLite it would hold the write lock the workers need.
pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 20
# The loopback address the "proxy" connects from; 127.0.0.1 is everyone else.
PROXY = "127.0.0.2"
# The workers' clock stands almost still at 00:00:10 of a minute, so no test straddles two windows.
FROZEN_START = "2030-01-07T09:00:10+00:00"
EXPLAIN = "/cron/?expression=*/5+*+*+*+*"


@dataclass(frozen=True)
class WebServer:
    port: int
    log: Path

    def get(self, *, source: str = "127.0.0.1", forwarded_for: str | None = None, path: str = EXPLAIN) -> int:
        """GET ``path`` (the explainer) from ``source``; the status code."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30, source_address=(source, 0))
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        try:
            conn.request("GET", path, headers=headers)
            return conn.getresponse().status
        finally:
            conn.close()

    def worker_pids(self, path: str = "/cron/") -> set[str]:
        """The pids of the workers that answered ``path`` (from the access log)."""
        return set(re.findall(rf"^<(\d+)> GET {path} ", self.log.read_text(), flags=re.MULTILINE))


def _database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[WebServer]:
    """gunicorn with two single-threaded workers (so concurrent requests reach both) on
    the test database, in its own process group, stopped whatever the test did."""
    port, log = free_port(), tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DJANGO_SETTINGS_MODULE": "tiffin.settings",
        "DEBUG": "1",  # static files without collectstatic's manifest, plain HTTP
        "WEB_THREADS": "1",
        "CRON_EXPLAINER_REQUESTS_PER_MINUTE": str(LIMIT),
        "TRUSTED_PROXIES": PROXY,
        "TIFFIN_CLOCK_START": FROZEN_START,
        "TIFFIN_CLOCK_ANCHOR": repr(time.time()),
        "TIFFIN_CLOCK_SPEED": "0.0001",
    }
    argv = [sys.executable, "-m", "gunicorn", "tiffin.wsgi", "--config", "deploy/gunicorn.conf.py"]
    argv += ["--workers", "2", "--bind", f"127.0.0.1:{port}", "--access-logformat", "%(p)s %(m)s %(U)s %(s)s"]
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv, env=env, cwd=PROJECT_DIR, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = WebServer(port=port, log=log)
    try:
        # Each worker loads Django after it boots: wait until both have answered.
        wait_for(lambda: _both_answer(server), timeout=90, what="both gunicorn workers answering")
        yield server
    finally:
        stop_group(popen, grace=10)
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM request_counts")  # committed by the workers, outside any test's transaction


def _both_answer(server: WebServer) -> bool:
    try:
        _burst([{"path": "/healthz"}] * 4, server)
    except OSError:
        return False
    return len(server.worker_pids("/healthz")) == 2


def _burst(requests: list[dict[str, str]], web: WebServer) -> list[int]:
    """The requests sent six at a time (so both workers answer); their statuses in order."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        return list(pool.map(lambda kwargs: web.get(**kwargs), requests))


def test_the_cap_holds_across_two_workers(web):
    codes = _burst([{"source": PROXY, "forwarded_for": "198.51.100.1"}] * (LIMIT + 1), web)
    assert sorted(codes) == [200] * LIMIT + [429]
    assert len(web.worker_pids()) == 2  # both processes counted in the one count


def test_behind_the_trusted_proxy_each_forwarded_client_has_its_own_count(web):
    heavy = _burst([{"source": PROXY, "forwarded_for": "198.51.100.2"}] * (LIMIT + 1), web)
    assert heavy.count(429) == 1
    # Sixty other visitors through the same proxy, after the heavy one was refused.
    others = _burst([{"source": PROXY, "forwarded_for": f"203.0.113.{n}"} for n in range(1, 61)], web)
    assert others == [200] * 60
    # A client's own claim to the left of what the proxy saw changes nothing.
    assert web.get(source=PROXY, forwarded_for="203.0.113.250, 198.51.100.2") == 429


def test_without_a_trusted_proxy_forwarded_for_is_ignored(web):
    forged = _burst([{"forwarded_for": f"192.0.2.{n}"} for n in range(1, LIMIT + 2)], web)
    assert sorted(forged) == [200] * LIMIT + [429]  # one count: the connecting address's
