"""A real high-availability PostgreSQL for the failover scenario: Patroni over etcd.

``patroni_cluster()`` starts, in a throwaway directory and never touching the machine's
server:

1. one etcd (its own client and peer ports, its own data directory);
2. three Patroni members of PostgreSQL 15 (``/usr/lib/postgresql/15/bin``), each with free
   ports for its postgres and its REST API, trust auth on 127.0.0.1 only. One bootstraps
   with ``initdb`` and leads; the others clone it with ``pg_basebackup`` and stream;
3. waits, following Patroni's REST API (``/cluster``) and the leader's
   ``pg_stat_replication``, until there is a leader and both replicas stream from it.

The application reaches it through libpq's multi-host string (``url()``:
``postgres://postgres@127.0.0.1:a,127.0.0.1:b,127.0.0.1:c/db?target_session_attrs=read-write``):
libpq tries each member in turn and keeps the one that accepts writes, so after a failover a
new connection finds the new leader by itself.

``primary_start_timeout`` is 0: when the leader's postgres dies, Patroni fails over to a
replica instead of restarting it in place (Patroni's default waits 300 s for a restart).

However the block ends (and at interpreter exit, should the block never end), every
process it started is stopped by process group: each Patroni (SIGTERM, it stops its
postgres; then SIGKILL), each postmaster's own group (Patroni starts postgres in a session
of its own), and etcd. A postmaster's children each run in a session of their own too, so
no group signal reaches them: every process under the members, their postmasters and etcd
is noted (pid and start time) before anything is stopped, and before the scenario's own
kill of a postmaster orphans its children, and each one still running at the end is
SIGKILLed by pid (a stopped WAL sender ignores the shutdown that would end it). As root
the processes run as the ``postgres`` user, which initdb and postgres require. Without
patroni or etcd the scenario skips with the reason, except under ``CI=true``, where it
fails (``make failover-deps`` installs them).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support.ports import free_port
from support.processes import stop_group, wait_for
from tests.scenarios.cluster import SUPERUSER, _as_owner
from tests.scenarios.harness import PostgresServer

BINDIR = Path("/usr/lib/postgresql/15/bin")
SCOPE = "tiffin"
MEMBERS = 3
# Patroni's timing, kept short so a failover takes seconds (ttl: how long a silent leader
# keeps its key; loop_wait: the pause between a member's HA loops).
DCS_TIMING = {"ttl": 20, "loop_wait": 1, "retry_timeout": 5}
# Small and quick, as tests/scenarios/cluster.py's SERVER_SETTINGS, but durable enough for
# synchronous replication to mean something: commits wait for the local flush and the standby.
POSTGRES_PARAMETERS = {
    "max_connections": 60,
    "shared_buffers": "32MB",
    "wal_level": "replica",
    "hot_standby": "on",
    "max_wal_senders": 10,
    "max_replication_slots": 10,
    "wal_log_hints": "on",
    "synchronous_commit": "on",
    "full_page_writes": "off",
    "fsync": "off",
}


def patroni_executables() -> tuple[str, str]:
    """The paths of ``patroni`` and ``etcd``; skips the scenario when one is missing (or
    PostgreSQL 15's server binaries are), except under CI=true, where it fails."""
    patroni, etcd = shutil.which("patroni"), shutil.which("etcd")
    if patroni and etcd and (BINDIR / "postgres").exists():
        return patroni, etcd
    message = (
        "the Patroni failover scenario needs patroni, etcd and PostgreSQL 15's server binaries "
        "(make failover-deps, or apt-get install patroni etcd-server postgresql-15)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Member:
    name: str
    directory: Path
    port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "patroni.log"

    @property
    def server(self) -> PostgresServer:
        return PostgresServer(host="127.0.0.1", port=self.port, user=SUPERUSER, password="")

    def api(self, path: str, *, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
        """Patroni's REST API on this member; the decoded JSON answer (None if not JSON)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                text = answer.read()
        except urllib.error.HTTPError as refused:  # /leader answers 503 on a replica, with JSON
            text = refused.read()
        try:
            return json.loads(text)
        except ValueError:
            return None

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid, from its ``postmaster.pid`` (None when there is none)."""
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def config(self, *, etcd_port: int) -> str:
        """Patroni's YAML for this member (JSON is YAML)."""
        return json.dumps(
            {
                "scope": SCOPE,
                "name": self.name,
                "log": {"level": "INFO"},
                "restapi": {
                    "listen": f"127.0.0.1:{self.api_port}",
                    "connect_address": f"127.0.0.1:{self.api_port}",
                },
                "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"]},
                "bootstrap": {
                    "dcs": {
                        **DCS_TIMING,
                        "primary_start_timeout": 0,
                        "maximum_lag_on_failover": 1048576,
                        "synchronous_mode": False,
                        "postgresql": {"use_pg_rewind": True, "parameters": POSTGRES_PARAMETERS},
                    },
                    "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, "no-sync"],
                },
                "postgresql": {
                    "listen": f"127.0.0.1:{self.port}",
                    "connect_address": f"127.0.0.1:{self.port}",
                    "data_dir": str(self.data),
                    "bin_dir": str(BINDIR),
                    "pgpass": str(self.directory / "pgpass"),
                    "authentication": {
                        "superuser": {"username": SUPERUSER},
                        "replication": {"username": SUPERUSER},
                        "rewind": {"username": SUPERUSER},
                    },
                    "parameters": {"unix_socket_directories": str(self.directory)},
                    "pg_hba": [
                        "local all all trust",
                        "host all all 127.0.0.1/32 trust",
                        "host replication all 127.0.0.1/32 trust",
                    ],
                },
            },
            indent=1,
        )

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class PatroniCluster:
    directory: Path
    members: list[Member]
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    etcd: subprocess.Popen[bytes] | None = None
    # Every process seen under this cluster's processes, as (pid, start time): killed at stop if still there.
    started: set[tuple[int, int]] = field(default_factory=set)

    def url(self, database: str) -> str:
        """The libpq multi-host URL of ``database``: every member, the writable one chosen."""
        hosts = ",".join(f"127.0.0.1:{member.port}" for member in self.members)
        return f"postgres://{SUPERUSER}@{hosts}/{database}?target_session_attrs=read-write"

    def roles(self) -> dict[str, str]:
        """Each member's role as Patroni reports it (``leader``, ``replica``, ``sync_standby``)."""
        for member in self.members:
            with contextlib.suppress(OSError):
                answer = member.api("/cluster")
                if answer is not None:
                    return {m["name"]: m["role"] for m in answer.get("members", [])}
        return {}

    def leader(self) -> Member:
        """The member Patroni names leader, whose postgres accepts writes."""
        found: list[Member] = []

        def writable_leader() -> bool:
            names = [name for name, role in self.roles().items() if role == "leader"]
            found[:] = [m for m in self.members if m.name in names and _accepts_writes(m.server)]
            return len(found) == 1

        wait_for(writable_leader, timeout=120, interval=0.2, what="a Patroni leader accepting writes")
        return found[0]

    def wait_streaming(self, *, replicas: int = MEMBERS - 1, timeout: float = 180) -> Member:
        """Wait until there is a leader and ``replicas`` members stream from it; the leader."""
        leader = self.leader()
        query = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        wait_for(
            lambda: _scalar(leader.server, query) == replicas,
            timeout=timeout,
            interval=0.25,
            what=f"{replicas} replicas streaming from {leader.name}",
        )
        return leader

    def set_synchronous_mode(self, enabled: bool, *, timeout: float = 60) -> None:
        """Patroni's ``synchronous_mode`` on or off (PATCH /config); waits until the leader
        has (or no longer has) a synchronous standby."""
        leader = self.leader()
        leader.api("/config", method="PATCH", body={"synchronous_mode": enabled})
        query = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
        wait_for(
            lambda: (
                (_scalar(leader.server, query) == 1) == enabled and ("sync_standby" in self.roles().values()) == enabled
            ),
            timeout=timeout,
            interval=0.25,
            what=f"synchronous_mode {'on' if enabled else 'off'} on {leader.name}",
        )

    def kill_postmaster(self, member: Member) -> int:
        """SIGKILL ``member``'s postmaster (a crash: no shutdown, nothing more sent); its pid."""
        pid = member.postmaster_pid()
        assert pid is not None, f"{member.name} has no postmaster.pid"
        self.started |= _process_tree([pid])  # its children outlive it, if only for a moment
        os.kill(pid, signal.SIGKILL)
        return pid

    def start(self, *, patroni: str, etcd: str) -> None:
        _own(self.directory)
        self._start_etcd(etcd)
        for member in self.members:
            member.directory.mkdir()
            _own(member.directory)
            config = member.directory / "patroni.yml"
            config.write_text(member.config(etcd_port=self.etcd_port))
            with member.log_path.open("ab") as log:
                member.process = subprocess.Popen(
                    [patroni, str(config)],
                    env=_system_environment(),
                    cwd=member.directory,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    **_as_owner(),
                )
        self.wait_streaming()

    def _start_etcd(self, executable: str) -> None:
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        with (self.directory / "etcd.log").open("ab") as log:
            self.etcd = subprocess.Popen(
                [
                    executable,
                    "--name=tiffin-etcd",
                    f"--data-dir={self.directory / 'etcd'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=tiffin-etcd={peer}",
                    "--initial-cluster-state=new",
                ],
                env=_system_environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_as_owner(),
            )
        wait_for(lambda: _etcd_healthy(client), timeout=60, interval=0.2, what="etcd answering /health")

    def stop(self) -> None:
        """Every process this cluster started, by process group: the members (SIGTERM lets
        Patroni stop its postgres), any postmaster left (its own group), then etcd; then
        every process ever seen under them that still runs, by pid (module docstring)."""
        self.started |= _process_tree(self._roots())
        for member in self.members:
            if member.process is not None:
                stop_group(member.process, grace=20, sig=signal.SIGTERM, leader_only=True)
                member.process = None
        self.started |= _process_tree(self._roots())
        for member in self.members:
            _kill_postmaster_group(member)
        if self.etcd is not None:
            stop_group(self.etcd, grace=10)
            self.etcd = None
        _kill_survivors(self.started)

    def _roots(self) -> list[int]:
        """The processes this cluster started or Patroni started for it: each Patroni, each
        running postmaster, etcd."""
        roots = [member.process.pid for member in self.members if member.process is not None]
        roots += [pid for member in self.members if (pid := member.postmaster_pid()) is not None and _is_postgres(pid)]
        return roots + ([self.etcd.pid] if self.etcd is not None else [])

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(
            f"===== Patroni member {member.name} ({member.log_path})\n{member.log_tail(lines)}"
            for member in self.members
        )


@contextmanager
def patroni_cluster() -> Iterator[PatroniCluster]:
    """A running etcd and three Patroni members, a leader and two streaming replicas (see
    the module docstring); every process stopped and the directory removed afterwards."""
    patroni, etcd = patroni_executables()
    directory = Path(tempfile.mkdtemp(prefix="tiffin-patroni-"))
    cluster = PatroniCluster(
        directory=directory, members=[Member(name=f"m{i}", directory=directory / f"m{i}") for i in range(MEMBERS)]
    )

    def cleanup() -> None:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)

    atexit.register(cleanup)  # should the block never be left (an interpreter exiting on a signal)
    try:
        cluster.start(patroni=patroni, etcd=etcd)
        yield cluster
    except BaseException:
        print(cluster.log_tails())
        raise
    finally:
        cleanup()
        atexit.unregister(cleanup)


def _accepts_writes(server: PostgresServer) -> bool:
    try:
        return _scalar(server, "SELECT NOT pg_is_in_recovery()") is True
    except psycopg.Error:
        return False


def _scalar(server: PostgresServer, query: str) -> Any:
    with server.connect() as conn:
        row = conn.execute(query.encode()).fetchone()
    return row[0] if row else None


def _etcd_healthy(client_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=2) as answer:
            return bool(json.loads(answer.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _system_environment() -> dict[str, str]:
    """Patroni is Debian's, on the system's Python: none of the virtualenv's variables."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    environment = {name: os.environ[name] for name in keep if name in os.environ}
    environment["PATH"] = ":".join(p for p in environment.get("PATH", "/usr/bin:/bin").split(":") if ".venv" not in p)
    if os.geteuid() == 0:
        environment["HOME"] = pwd.getpwnam(SUPERUSER).pw_dir
    return environment


def _own(directory: Path) -> None:
    directory.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        owner = pwd.getpwnam(SUPERUSER)
        os.chown(directory, owner.pw_uid, owner.pw_gid)


def _kill_postmaster_group(member: Member) -> None:
    """SIGKILL the process group of ``member``'s postmaster, if one still runs (Patroni
    starts postgres in a session of its own, so stopping Patroni's group misses it)."""
    pid = member.postmaster_pid()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        pgid = os.getpgid(pid)
        if _is_postgres(pid):
            os.killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and _is_postgres(pid):
                time.sleep(0.05)


def _is_postgres(pid: int) -> bool:
    """Whether ``pid`` is a postgres process (a stale postmaster.pid may name a reused pid)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return False


def _process_tree(roots: list[int]) -> set[tuple[int, int]]:
    """``roots`` and every process under them, as (pid, start time in clock ticks since
    boot): the start time tells a survivor from a later process that reused its pid."""
    parents: dict[int, int] = {}
    starts: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # from field 3 (state) on
            pid = int(stat.parent.name)
            parents[pid], starts[pid] = int(fields[1]), int(fields[19])
    found: set[int] = set()
    frontier = [pid for pid in roots if pid in starts]
    while frontier:
        pid = frontier.pop()
        if pid not in found:
            found.add(pid)
            frontier += [child for child, parent in parents.items() if parent == pid]
    return {(pid, starts[pid]) for pid in found}


def _start_time(pid: int) -> int | None:
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return None


def _kill_survivors(seen: set[tuple[int, int]], *, timeout: float = 10) -> None:
    """SIGKILL each of ``seen`` still running (the same pid and start time; a stopped
    process takes SIGKILL too), and wait until they are gone."""
    for pid, start in seen:
        if _start_time(pid) == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(pid, start) for pid, start in seen):
        time.sleep(0.05)


def _alive(pid: int, start: int) -> bool:
    """Whether ``pid`` still runs as the process that started at ``start`` (a zombie,
    killed and waiting for its parent, counts as gone)."""
    if _start_time(pid) != start:
        return False
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False
