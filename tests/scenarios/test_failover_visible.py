"""Scenario: a failover shows in ``check_runs``. A primary and its streaming standby run on
throwaway clusters (``tests/scenarios/cluster.py``); the standby is promoted for real, so
the fencing epoch (the timeline) moves from 1 to 2 as it does in production.

The figures ``/metrics`` reads from the database follow: the epoch, when it changed, the
runs still running under the old one.

1. Before: a check on the primary remembers epoch 1 and reports no failover; a run is
   started there (the app's own ``sql.start_runs`` with a token from ``next_fence``).
2. The primary crashes and the standby is promoted. The check on the new primary reports
   the failover (epoch 1 -> 2) and the run still running under epoch 1.
3. The run is started again under epoch 2: the check reports it as cut off by the
   failover and claimed again, and no longer as running under the old epoch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.scenarios.cluster import ThrowawayCluster, migrated_pair
from tests.scenarios.harness import HANG_GUARD_SECONDS, PostgresServer, manage_output
from tests.scenarios.replication import wait_replayed

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

DATABASE = "tiffin_failover_visible"
PASS = datetime(2026, 11, 1, 20, 0, tzinfo=UTC)
CHECK = PASS + timedelta(minutes=30)
EPOCH = 2**40

START_ONE = (
    "import json; from datetime import datetime; from scheduling import sql; from scheduling.models import JobRun\n"
    "run = JobRun.objects.order_by('id').first()\n"
    "JobRun.objects.filter(id=run.id).update(status='enqueued', enqueued_at=datetime.fromisoformat({now!r}))\n"
    "[started] = sql.start_runs(run_ids=[run.id], fence=sql.next_fence(), now=datetime.fromisoformat({now!r}), "
    "worker='scenario')\n"
    "print(json.dumps({{'id': started.id, 'fence': started.fence}}))"
)
# The worker's retry of an abandoned run, reduced to its two writes: back to enqueued, started anew.
START_AGAIN = (
    "import json; from datetime import datetime; from scheduling import sql; from scheduling.models import JobRun\n"
    "JobRun.objects.filter(id={run_id}).update(status='enqueued', enqueued_at=datetime.fromisoformat({now!r}))\n"
    "[started] = sql.start_runs(run_ids=[{run_id}], fence=sql.next_fence(), now=datetime.fromisoformat({now!r}), "
    "worker='scenario')\n"
    "print(json.dumps({{'id': started.id, 'fence': started.fence}}))"
)


def test_check_runs_reports_the_failover_and_the_runs_it_cut_off(
    failover_pair: tuple[ThrowawayCluster, ThrowawayCluster],
) -> None:
    primary, standby = failover_pair
    # The first pass registers the schedules; the next claims their ticks since.
    for now in (PASS - timedelta(hours=1), PASS):
        _manage(primary.server, "tick", "--now", now.isoformat(), "--json")
    before = _failovers(primary.server, CHECK)
    assert before == [], before
    start_one = START_ONE.format(now=PASS.isoformat())
    started = json.loads(_manage(primary.server, "shell", "--verbosity", "0", "-c", start_one))
    assert started["fence"] // EPOCH == 1
    wait_replayed(primary.server)

    primary.stop_immediate()
    standby.promote()

    after = _failovers(standby.server, CHECK + timedelta(minutes=1))
    [change] = [problem for problem in after if problem["job"] == "(database)"]
    assert "the database failed over: epoch 1 -> 2" in change["detail"], change
    [stale] = [problem for problem in after if problem["run"] == started["id"]]
    assert "started under epoch 1, before the database failed over to epoch 2" in stale["detail"], stale
    metrics = _metrics(standby.server)
    assert metrics["tiffin_fence_epoch"] == 2
    assert metrics["tiffin_runs_running_old_epoch"] == 1
    assert metrics["tiffin_fence_epoch_changed_timestamp_seconds"] == (CHECK + timedelta(minutes=1)).timestamp()

    again = json.loads(
        _manage(
            standby.server,
            "shell",
            "--verbosity",
            "0",
            "-c",
            START_AGAIN.format(run_id=started["id"], now=(CHECK + timedelta(minutes=2)).isoformat()),
        )
    )
    assert again["fence"] // EPOCH == 2
    later = _failovers(standby.server, CHECK + timedelta(minutes=3))
    [retried] = [problem for problem in later if problem["run"] == started["id"]]
    assert (
        "cut off by the database's failover: attempt 1 started under epoch 1, attempt 2 under epoch 2"
        in (retried["detail"])
    ), retried
    assert [problem["job"] for problem in later].count("(database)") == 1, "the failover is reported once"
    assert _metrics(standby.server)["tiffin_runs_running_old_epoch"] == 0


@pytest.fixture
def failover_pair() -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """A primary with a migrated DATABASE and its asynchronous standby (``migrated_pair``)."""
    with migrated_pair(DATABASE) as pair:
        yield pair


def _failovers(server: PostgresServer, now: datetime) -> list[dict[str, Any]]:
    """The problems of kind failover ``check_runs --json`` reports at ``now``."""
    report = json.loads(_manage(server, "check_runs", "--now", now.isoformat(), "--json", allowed=(0, 1)))
    return [problem for problem in report["problems"] if problem["kind"] == "failover"]


METRICS = (
    "import json; from datetime import datetime, UTC; from operations.metrics import DatabaseCollector\n"
    "families = DatabaseCollector(now=datetime.now(UTC)).collect()\n"
    "print(json.dumps({f.name: f.samples[0].value for f in families if f.name.startswith(('tiffin_fence', "
    "'tiffin_runs_running'))}))"
)


def _metrics(server: PostgresServer) -> dict[str, float]:
    """The fence's figures ``/metrics`` reads from the database (``DatabaseCollector``)."""
    figures: dict[str, float] = json.loads(_manage(server, "shell", "--verbosity", "0", "-c", METRICS))
    return figures


def _manage(server: PostgresServer, *args: str, allowed: tuple[int, ...] = (0,)) -> str:
    """``manage.py <args>`` against DATABASE on ``server`` (``manage_output``); its stdout."""
    return manage_output(server.url(DATABASE), *args, allowed=allowed)
