"""A private PgBouncer in transaction mode, for ``simulate --pooler`` and the pooler
scenarios.

Not the system service: a generated config in a temporary directory, a free local port,
trust auth towards the PostgreSQL server it fronts. PgBouncer refuses to run as root, so
as root it is started with ``-u postgres`` and its directory is handed to that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from simulation.processes import stop_group, wait_for


@dataclass(frozen=True)
class Upstream:
    """The PostgreSQL server PgBouncer passes connections to."""

    host: str
    port: int
    user: str
    password: str = ""


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if Path(p).exists()), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(upstream: Upstream, port: int, workdir: Path) -> str:
    return f"""[databases]
* = host={upstream.host} port={upstream.port}

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
admin_users = {upstream.user}
logfile = {workdir}/pgbouncer.log
pidfile = {workdir}/pgbouncer.pid
"""


@contextmanager
def pgbouncer(upstream: Upstream, *, binary: str) -> Iterator[int]:
    """Run a transaction-mode PgBouncer in front of ``upstream``; yield its port."""
    workdir = Path(tempfile.mkdtemp(prefix="tiffin-pgbouncer-"))
    port = _free_port()
    (workdir / "userlist.txt").write_text(f'"{upstream.user}" "{upstream.password}"\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(_config(upstream, port, workdir))
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
        stop_group(process, grace=10)
        shutil.rmtree(workdir, ignore_errors=True)


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
