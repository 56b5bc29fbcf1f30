"""Throwaway PostgreSQL servers for the scenarios that restart, stop or promote one.

The machine's server is shared (other databases, other people's tests), so restarting it
is never an option. Instead:

1. ``initdb`` a new cluster into a temporary directory (trust auth, superuser
   ``postgres``). initdb and the server refuse to run as root, so as root the directory
   and the processes belong to the ``postgres`` user.
2. Start ``postgres`` on a free local port, in its own process group, with its socket
   in that directory (nothing is written where the machine's server lives).
3. ``restart()`` is a fast shutdown (every connection cut, as a failover or crash
   does) and a start on the same port and data.
4. However the block ends, the server is stopped (SIGINT, then SIGKILL to its process
   group) and the directory removed.

``replicated_pair()`` adds a streaming standby of such a primary (``pg_basebackup -R``
into a second directory, its own port and process group), for the failover scenario:
``stop_immediate()`` is the primary's crash (``pg_ctl -m immediate stop``: SIGQUIT to
the postmaster) and ``promote()`` the standby's ``pg_ctl promote``.

When the binaries are missing the scenario skips with the reason, except under
``CI=true``, where it fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import pytest

from support.ports import free_port
from support.processes import stop_group
from tests.scenarios.harness import PostgresServer, Scenario, manage_output

SUPERUSER = "postgres"
# Small and quick: the scenario needs a few connections, never durability.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "50",
}


def postgres_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with initdb and postgres (or the
    directory of ``initdb`` on PATH); skips, or fails under CI=true, when there is none."""
    found = sorted(
        (p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if (p.parent / "postgres").exists()),
        key=lambda bindir: [int(part) for part in re.findall(r"\d+", bindir.parent.name)],
    )
    on_path = shutil.which("initdb")
    if found:
        return found[-1]
    if on_path and (Path(on_path).parent / "postgres").exists():
        return Path(on_path).parent
    message = "the restart scenario needs PostgreSQL's server binaries (initdb, postgres): apt-get install postgresql"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class _Owner(TypedDict):
    user: int | None
    group: int | None
    extra_groups: list[int] | None


def _as_owner() -> _Owner:
    """Popen's identity for the cluster's processes: the postgres user when we are root
    (initdb and postgres refuse root), else ourselves."""
    if os.geteuid() != 0:
        return {"user": None, "group": None, "extra_groups": None}
    owner = pwd.getpwnam(SUPERUSER)
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


def _run_tool(args: list[str], *, timeout: float, what: str) -> None:
    """Run one of the server's tools (pg_basebackup, pg_ctl) as the cluster's owner, in a
    process group of its own (pg_basebackup forks its WAL streamer), stopped whole however
    the call ends; fail with its output when it exits non-zero."""
    with tempfile.TemporaryFile() as output:
        tool = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **_as_owner(),
        )
        try:
            code = tool.wait(timeout=timeout)
        finally:
            stop_group(tool, grace=5)
        output.seek(0)
        assert code == 0, f"{what} failed ({code}):\n{output.read().decode(errors='replace')}"


@dataclass
class ThrowawayCluster:
    bindir: Path
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # Settings over SERVER_SETTINGS (the replicated pair commits synchronously, as production does).
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def server(self) -> PostgresServer:
        return PostgresServer(host="127.0.0.1", port=self.port, user=SUPERUSER, password="")

    def _own_directory(self) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam(SUPERUSER)
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)

    def init(self) -> None:
        self._own_directory()
        done = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **_as_owner(),
        )
        assert done.returncode == 0, f"initdb failed:\n{done.stdout}\n{done.stderr}"

    def start(self) -> None:
        settings = {
            **SERVER_SETTINGS,
            **self.settings,
            "port": str(self.port),
            "unix_socket_directories": str(self.directory),
        }
        options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data), *options],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped as one
                **_as_owner(),
            )
        self.server.wait_ready()

    def stop(self, *, grace: float = 30) -> None:
        """Fast shutdown (SIGINT to the postmaster); the group is SIGKILLed if it lingers."""
        if self.process is None:
            return
        children = _children(self.process.pid)
        stop_group(self.process, grace=grace, sig=signal.SIGINT, leader_only=True)
        _kill_survivors(children)
        self.process = None

    def stop_immediate(self) -> None:
        """A crash: immediate shutdown (SIGQUIT to the postmaster, as ``pg_ctl -m immediate
        stop`` sends), no checkpoint, nothing more sent to a standby; the group is SIGKILLed
        if it lingers (a stopped WAL sender cannot act on SIGQUIT)."""
        if self.process is None:
            return
        children = _children(self.process.pid)
        stop_group(self.process, grace=10, sig=signal.SIGQUIT, leader_only=True)
        _kill_survivors(children)
        self.process = None

    def basebackup_from(self, primary: ThrowawayCluster) -> None:
        """Make this cluster's data a streaming standby of ``primary``: a base backup with
        its WAL, and ``-R`` (standby.signal and primary_conninfo)."""
        self._own_directory()
        _run_tool(
            [
                str(self.bindir / "pg_basebackup"),
                f"--dbname=host=127.0.0.1 port={primary.port} user={SUPERUSER} application_name=standby",
                "-D",
                str(self.data),
                "-X",
                "stream",
                "-R",
                "--no-sync",
                "--checkpoint=fast",
            ],
            timeout=120,
            what="pg_basebackup",
        )

    def promote(self) -> None:
        """``pg_ctl promote``, waiting until the standby accepts writes."""
        _run_tool(
            [str(self.bindir / "pg_ctl"), "promote", "-w", "-t", "60", "-D", str(self.data)],
            timeout=90,
            what="pg_ctl promote",
        )

    def restart(self) -> None:
        """What a failover or a crash does to clients: every connection is cut, and the
        server comes back at the same address with the same data."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 25) -> str:
        with suppress(FileNotFoundError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class PrivateScenario:
    """A scenario whose database lives on a throwaway cluster (the ``private_scenario`` fixture)."""

    scenario: Scenario
    cluster: ThrowawayCluster


@contextmanager
def throwaway_cluster() -> Iterator[ThrowawayCluster]:
    """A running private cluster (see the module docstring); stopped and removed afterwards."""
    cluster = ThrowawayCluster(bindir=postgres_bindir(), directory=Path(tempfile.mkdtemp(prefix="tiffin-pg-")))
    try:
        cluster.init()
        cluster.start()
        yield cluster
    except BaseException:
        print(f"===== private PostgreSQL ({cluster.log_path})\n{cluster.log_tail()}")
        raise
    finally:
        cluster.stop()
        shutil.rmtree(cluster.directory, ignore_errors=True)


# The replicated pair commits as production does: synchronous_commit on, so a commit the
# client saw is on the primary's disk (and, replication being asynchronous, maybe nowhere else).
REPLICATED_SETTINGS = {"synchronous_commit": "on", "wal_level": "replica", "max_wal_senders": "4"}


@contextmanager
def replicated_pair(settings: dict[str, str] | None = None) -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """A running private primary and its asynchronous streaming standby (see the module
    docstring); both stopped and removed afterwards, however the block ends. ``settings``
    go over REPLICATED_SETTINGS on both (bench.replication_cost turns fsync back on)."""
    bindir = postgres_bindir()
    primary, standby = (
        ThrowawayCluster(
            bindir=bindir,
            directory=Path(tempfile.mkdtemp(prefix=f"tiffin-pg-{role}-")),
            settings={**REPLICATED_SETTINGS, **(settings or {})},
        )
        for role in ("primary", "standby")
    )
    try:
        primary.init()
        primary.start()
        standby.basebackup_from(primary)
        standby.start()
        yield primary, standby
    except BaseException:
        for role, cluster in (("primary", primary), ("standby", standby)):
            print(f"===== private PostgreSQL, {role} ({cluster.log_path})\n{cluster.log_tail()}")
        raise
    finally:
        for cluster in (primary, standby):
            cluster.stop()
            shutil.rmtree(cluster.directory, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """The processes ``pid`` forked. A postmaster's children each call setsid(), so the
    SIGKILL to its process group misses them: a WAL sender a scenario SIGSTOPped outlived
    its crashed primary (and held its checkpointer) until they were killed by pid."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _kill_survivors(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` still running as a postgres backend once its postmaster is
    gone (a stopped process takes SIGKILL too); a pid reused since by anything else is left."""
    for pid in pids:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"postgres"):
                os.kill(pid, signal.SIGKILL)


@contextmanager
def migrated_pair(database: str) -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """``replicated_pair`` with ``database`` created and migrated on the primary: a primary
    and its asynchronous standby, both stopped (by process group) and removed however the
    block ends."""
    with replicated_pair() as (primary, standby):
        primary.server.create_database(database)
        manage_output(primary.server.url(database), "migrate", "--noinput", "--verbosity", "0")
        yield primary, standby
