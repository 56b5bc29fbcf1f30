"""Scenario: the database forgets. An asynchronous standby is promoted after its primary
committed work whose WAL never reached it (issue 33's measured case, docs/failover.md).

A primary and its streaming standby run on throwaway clusters (``tests/scenarios/cluster.py``,
never the machine's server). With everything replicated, the primary's WAL sender is paused
(SIGSTOP), so what follows commits on the primary and goes nowhere: a scheduler pass claims
the next ticks, and the app hands out forty more fencing tokens. Then the primary crashes
(immediate stop) and the standby is promoted.

1. The fence: the first token of the new primary is greater than every token the old one
   handed out, replicated or not. A plain sequence fails this: it logs 32 values ahead, so
   the new primary repeats every value past the last batch that reached it.
2. What asynchronous replication loses, as documented: the claims committed during the
   pause are gone, and the same ticks are claimed again on the new primary.
3. With a synchronous standby (``synchronous_standby_names``) the same pause holds the
   pass's commit until the crash: the pass fails, nothing it claimed was ever confirmed or
   seen, and every token the app was given is still below the new primary's.

The app's own code takes the tokens and the claims (``manage.py shell`` calling
``scheduling.sql.next_fence``, ``manage.py tick``), against the cluster's address.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from support.processes import PROJECT_DIR, in_group, wait_for
from tests.scenarios.cluster import ThrowawayCluster, migrated_pair
from tests.scenarios.harness import HANG_GUARD_SECONDS, PostgresServer, manage_output
from tests.scenarios.replication import pause_wal_sender, wait_replayed

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

DATABASE = "tiffin_failover"
# Replicated: the schedules' first pass. Lost: the pass an hour later, while the WAL sender sleeps.
REPLICATED_PASS = datetime(2026, 11, 1, 20, 0, tzinfo=UTC)
LOST_PASS = datetime(2026, 11, 1, 21, 0, tzinfo=UTC)
TOKENS_DURING_PAUSE = 40
CLAIMS = "SELECT job_name, scheduled_for FROM job_runs WHERE scheduled_for > %s ORDER BY job_name, scheduled_for"


def test_every_fence_after_an_asynchronous_failover_exceeds_every_fence_before_it(
    failover_pair: tuple[ThrowawayCluster, ThrowawayCluster],
) -> None:
    primary, standby = failover_pair
    replicated_tokens = _take_tokens(primary.server, 5)
    _tick(primary.server, REPLICATED_PASS)
    wait_replayed(primary.server)

    pause_wal_sender(primary.server)
    unreplicated_tokens = _take_tokens(primary.server, TOKENS_DURING_PAUSE)
    lost_claims = _tick(primary.server, LOST_PASS)
    committed = _rows(primary.server, CLAIMS, [REPLICATED_PASS])
    primary.stop_immediate()
    standby.promote()

    old_tokens = replicated_tokens + unreplicated_tokens
    assert sorted(set(old_tokens)) == old_tokens, "the old primary's tokens were distinct and increasing"
    [first_new] = _take_tokens(standby.server, 1)
    print(
        f"old primary: tokens {old_tokens[0]}..{old_tokens[-1]}, {len(committed)} claims committed unreplicated; "
        f"new primary's first token {first_new}"
    )
    assert first_new > max(old_tokens), (
        f"the new primary handed out {first_new} although the old one had reached {max(old_tokens)}"
    )

    # What asynchronous replication loses (docs/failover.md): the pass's committed claims...
    assert lost_claims and sorted(lost_claims) == committed
    assert _rows(standby.server, CLAIMS, [REPLICATED_PASS]) == []
    # ...so the new primary claims the same ticks again.
    assert sorted(_tick(standby.server, LOST_PASS)) == committed


def test_with_a_synchronous_standby_no_confirmed_claim_is_lost(
    failover_pair: tuple[ThrowawayCluster, ThrowawayCluster],
) -> None:
    primary, standby = failover_pair
    _make_standby_synchronous(primary.server)
    replicated_tokens = _take_tokens(primary.server, 5)
    replicated_claims = _tick(primary.server, REPLICATED_PASS)

    pause_wal_sender(primary.server)
    with _manage_started(primary.server, "tick", "--now", LOST_PASS.isoformat(), "--json") as waiting:
        _wait_claim_waiting_for_standby(primary.server)
        # Committed on the primary's disk, and still invisible: no worker can take these runs.
        assert _rows(primary.server, CLAIMS, [REPLICATED_PASS]) == []
        primary.stop_immediate()
        assert waiting.wait(timeout=60) != 0, "the pass was never told its claims committed"
    standby.promote()

    [first_new] = _take_tokens(standby.server, 1)
    assert first_new > max(replicated_tokens)
    everything = "SELECT job_name, scheduled_for FROM job_runs ORDER BY job_name, scheduled_for"
    assert _rows(standby.server, everything, []) == sorted(replicated_claims), "every confirmed claim survived"


@pytest.fixture
def failover_pair() -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """A primary with a migrated DATABASE and its asynchronous standby (``migrated_pair``)."""
    with migrated_pair(DATABASE) as pair:
        yield pair


def _take_tokens(server: PostgresServer, count: int) -> list[int]:
    """``count`` fencing tokens from the app's own ``next_fence``, one statement each."""
    code = f"from scheduling import sql; print([sql.next_fence() for _ in range({count})])"
    tokens: list[int] = json.loads(_manage(server, "shell", "--verbosity", "0", "-c", code))
    return tokens


def _tick(server: PostgresServer, now: datetime) -> list[tuple[str, datetime]]:
    """One scheduler pass at ``now``; the ticks it claimed."""
    report = json.loads(_manage(server, "tick", "--now", now.isoformat(), "--json"))
    return [(c["job_name"], datetime.fromisoformat(c["scheduled_for"])) for c in report["claimed"]]


def _manage(server: PostgresServer, *args: str) -> str:
    """``manage.py <args>`` against DATABASE on ``server`` (``manage_output``); its stdout."""
    return manage_output(server.url(DATABASE), *args)


@contextmanager
def _manage_started(server: PostgresServer, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``manage.py <args>`` against DATABASE on ``server``, running for the block in its own
    process group, stopped whole afterwards."""
    env = {**os.environ, "DATABASE_URL": server.url(DATABASE), "LOG_LEVEL": "WARNING"}
    with in_group([sys.executable, str(PROJECT_DIR / "manage.py"), *args], env=env, grace=5) as command:
        yield command


def _make_standby_synchronous(server: PostgresServer) -> None:
    """Every commit waits for the standby's flush (synchronous_commit is on)."""
    with server.connect() as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        conn.execute("SELECT pg_reload_conf()")

    def synchronous() -> bool:
        with server.connect() as conn:
            return conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone() == ("sync",)

    wait_for(synchronous, timeout=30, interval=0.1, what="the standby becoming synchronous")


def _wait_claim_waiting_for_standby(server: PostgresServer) -> None:
    """Wait until a backend that wrote job_runs waits for the standby to confirm its commit
    (it holds its row lock on the table until the wait ends)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid"
        " WHERE a.wait_event = 'SyncRep' AND l.relation = 'job_runs'::regclass AND l.mode = 'RowExclusiveLock'"
    )

    def waiting() -> bool:
        with server.connect(DATABASE) as conn:
            row = conn.execute(query).fetchone()
        return row is not None and row[0] > 0

    wait_for(waiting, timeout=60, interval=0.1, what="a claim's commit waiting for the synchronous standby")


def _rows(server: PostgresServer, query: str, params: list[object]) -> list[tuple[str, datetime]]:
    with server.connect(DATABASE) as conn:
        return [(name, when) for name, when in conn.execute(query.encode(), params).fetchall()]
