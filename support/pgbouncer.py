"""A private PgBouncer in transaction mode, for ``simulate --pooler`` (a strategy run, a
plain run or a ``--chaos`` run) and the pooler scenarios.

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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from support.ports import free_port
from support.processes import stop_group, wait_for

# Server connections a private PgBouncer keeps per database and user, unless told otherwise.
POOL_SIZE = 30


@dataclass(frozen=True)
class Upstream:
    """The PostgreSQL server PgBouncer passes connections to."""

    host: str
    port: int
    user: str
    password: str = ""


@dataclass(frozen=True)
class Pooled:
    """A running private PgBouncer: its port, and the URL a process uses to reach the
    database through it."""

    port: int
    user: str
    url: str

    def clients(self) -> list[dict[str, Any]]:
        """PgBouncer's ``SHOW CLIENTS``, one dict a client connection (``application_name``,
        ``state``, ``database``...). Its admin console speaks only the simple query
        protocol, hence the client-side cursor."""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="pgbouncer", autocommit=True, connect_timeout=10
        ) as admin:
            cursor = psycopg.ClientCursor(admin)
            cursor.execute("SHOW CLIENTS")
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if Path(p).exists()), None)


def _config(upstream: Upstream, port: int, workdir: Path, pool_size: int) -> str:
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
default_pool_size = {pool_size}
server_reset_query =
admin_users = {upstream.user}
logfile = {workdir}/pgbouncer.log
pidfile = {workdir}/pgbouncer.pid
"""


@dataclass(frozen=True)
class Prepared:
    """A PgBouncer ready to start: its command line, the free port it will listen on and
    its directory (config, userlist, log), to be removed once it has stopped."""

    command: list[str]
    port: int
    workdir: Path


def pgbouncer_prepare(upstream: Upstream, *, binary: str, pool_size: int = POOL_SIZE) -> Prepared:
    """Write the config of a transaction-mode PgBouncer in front of ``upstream`` (up to
    ``pool_size`` server connections per database and user) in a new directory; as root,
    hand the directory to ``postgres`` and run as that user. The caller starts the command
    in a process group of its own and waits for ``pgbouncer_accepts``."""
    workdir = Path(tempfile.mkdtemp(prefix="tiffin-pgbouncer-"))
    port = free_port()
    (workdir / "userlist.txt").write_text(f'"{upstream.user}" "{upstream.password}"\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(_config(upstream, port, workdir, pool_size))
    command = [binary, str(config)]
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
        command = [binary, "-u", "postgres", str(config)]
    return Prepared(command=command, port=port, workdir=workdir)


@contextmanager
def pgbouncer(upstream: Upstream, *, binary: str, pool_size: int = POOL_SIZE) -> Iterator[int]:
    """Run a transaction-mode PgBouncer in front of ``upstream`` (up to ``pool_size``
    server connections); yield its port."""
    prepared = pgbouncer_prepare(upstream, binary=binary, pool_size=pool_size)
    process = subprocess.Popen(
        prepared.command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_for(lambda: pgbouncer_accepts(prepared.port), timeout=15, what="pgbouncer listening")
        yield prepared.port
    finally:
        stop_group(process, grace=10)
        shutil.rmtree(prepared.workdir, ignore_errors=True)


def pgbouncer_accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def pooled_database(db: Mapping[str, Any], *, pool_size: int = POOL_SIZE) -> Iterator[Pooled]:
    """A private PgBouncer in front of the database of Django's ``db`` settings (one entry
    of ``DATABASES``) with up to ``pool_size`` server connections; yields it with the
    ``DATABASE_URL`` its processes use: server-side cursors off, since a transaction-mode
    pooler cannot keep a cursor across transactions. Raises RuntimeError without a
    pgbouncer executable."""
    binary = pgbouncer_binary()
    if binary is None:
        raise RuntimeError("needs pgbouncer (make scenario-deps, or apt-get install pgbouncer)")
    upstream = Upstream(
        host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 5432), user=db["USER"], password=db["PASSWORD"] or ""
    )
    with pgbouncer(upstream, binary=binary, pool_size=pool_size) as port:
        auth = f"{upstream.user}:{upstream.password}" if upstream.password else upstream.user
        url = f"postgres://{auth}@127.0.0.1:{port}/{db['NAME']}?disable_server_side_cursors=true"
        yield Pooled(port=port, user=upstream.user, url=url)
