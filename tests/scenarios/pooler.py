"""PgBouncer for the pooler scenarios (``support.pgbouncer`` runs it), its statistics,
and a sampler of the advisory locks held outside transactions."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from support import pgbouncer as shared_pgbouncer
from tests.scenarios.harness import PostgresServer

# Advisory locks held by a backend that is not inside a transaction: a session-level
# lock, which a transaction-mode pooler would leave stuck on a pooled server connection.
ADVISORY_LOCKS_OUTSIDE_TRANSACTIONS = """
SELECT l.pid, l.classid, l.objid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND a.datname = %s AND a.state = 'idle'
"""
ADVISORY_LOCKS = """
SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
WHERE l.locktype = 'advisory' AND d.datname = %s
"""


def pgbouncer_binary() -> str:
    """The pgbouncer executable; skips the scenario when it is missing, except in CI,
    where `make scenario-deps` must have installed it."""
    found = shared_pgbouncer.pgbouncer_binary()
    if found:
        return found
    message = "pgbouncer is not installed (run `make scenario-deps` as root, or apt-get install pgbouncer)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def pgbouncer(server: PostgresServer) -> Iterator[int]:
    """Run a transaction-mode PgBouncer in front of ``server``; yield its port."""
    upstream = shared_pgbouncer.Upstream(host=server.host, port=server.port, user=server.user, password=server.password)
    with shared_pgbouncer.pgbouncer(upstream, binary=pgbouncer_binary()) as port:
        yield port


def pooled_transactions(port: int, database: str) -> int:
    """Transactions PgBouncer passed to ``database`` (its admin console speaks only the
    simple query protocol, so ask through psql)."""
    out = subprocess.run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "postgres",
            "-At",
            "-F",
            ",",
            "pgbouncer",
            "-c",
            "SHOW STATS",
        ],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    return sum(int(line.split(",")[1]) for line in out.splitlines() if line.split(",")[0] == database)


@dataclass
class AdvisoryLockSampler:
    """Samples pg_locks (directly, not through the pooler) in a background thread while
    the scenario runs; records any advisory lock seen on an idle backend in two
    consecutive samples (one sample could catch a transaction ending mid-query)."""

    server: PostgresServer
    database: str
    interval: float = 0.05
    samples: int = 0
    leaked: set[tuple[int, int, int]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> AdvisoryLockSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        previous: set[tuple[int, int, int]] = set()
        with self.server.connect() as conn:
            while not self._stop.wait(self.interval):
                current = {tuple(row) for row in conn.execute(ADVISORY_LOCKS_OUTSIDE_TRANSACTIONS, [self.database])}
                self.leaked |= current & previous
                previous = current
                self.samples += 1
