"""Streaming replication, as the failover scenarios watch and break it: the primary's WAL
sender, the standby's replay, and the pause (SIGSTOP of the WAL sender) after which what
the primary commits reaches no standby. Used by the scenarios on ``cluster.replicated_pair``
and by ``failover_table``."""

from __future__ import annotations

import os
import signal

from support.processes import wait_for
from tests.scenarios.harness import PostgresServer


def walsender_pid(server: PostgresServer) -> int:
    """The pid of the primary's (only) WAL sender."""
    with server.connect() as conn:
        row = conn.execute("SELECT pid FROM pg_stat_replication").fetchone()
    assert row is not None, "the standby is streaming"
    return int(row[0])


def wait_replayed(server: PostgresServer) -> None:
    """Wait until the standby has replayed everything the primary has written."""
    query = "SELECT replay_lsn >= pg_current_wal_lsn() FROM pg_stat_replication"

    def caught_up() -> bool:
        with server.connect() as conn:
            row = conn.execute(query).fetchone()
        return row is not None and bool(row[0])

    wait_for(caught_up, timeout=60, interval=0.1, what="the standby replaying the primary's WAL")


def pause_wal_sender(server: PostgresServer) -> None:
    """SIGSTOP the primary's WAL sender: what the primary commits from now on reaches no
    standby. No SIGCONT: the primary's crash takes the stopped sender with it
    (``ThrowawayCluster.stop_immediate`` kills it by pid)."""
    os.kill(walsender_pid(server), signal.SIGSTOP)
