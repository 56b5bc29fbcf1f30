"""A private PgBouncer in transaction mode for the pooler scenario.

Not the system service: a generated config in a temporary directory, a free local port,
trust auth towards the local PostgreSQL. PgBouncer refuses to run as root, so as root it
is started with ``-u postgres`` and its directory is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from simulation.processes import wait_for
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
    found = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if Path(p).exists()), None)
    if found:
        return found
    message = "pgbouncer is not installed (run `make scenario-deps` as root, or apt-get install pgbouncer)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(server: PostgresServer, port: int, workdir: Path) -> str:
    return f"""[databases]
* = host={server.host} port={server.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir}/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 30
server_reset_query =
admin_users = {server.user}
logfile = {workdir}/pgbouncer.log
pidfile = {workdir}/pgbouncer.pid
"""


@contextmanager
def pgbouncer(server: PostgresServer) -> Iterator[int]:
    """Run a transaction-mode PgBouncer in front of ``server``; yield its port."""
    binary = pgbouncer_binary()
    workdir = Path(tempfile.mkdtemp(prefix="tiffin-pgbouncer-"))
    port = _free_port()
    (workdir / "userlist.txt").write_text(f'"{server.user}" "{server.password}"\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(_config(server, port, workdir))
    command = [binary, str(config)]
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
        command = [binary, "-u", "postgres", str(config)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _accepts(port), timeout=15, what="pgbouncer listening")
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


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


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


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
