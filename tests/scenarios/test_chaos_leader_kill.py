"""``manage.py simulate --chaos SEED --leader-kills 1`` on a Patroni cluster: the seed's
faults, and the primary's postmaster SIGKILLed in the middle of them.

Three Patroni members over etcd (``tests/scenarios/patroni_cluster.py``), in synchronous
mode; the simulation, its servers and its order traffic reach the cluster through libpq's
multi-host URL. What must hold is what every chaos seed must hold (the report's
invariants: every tick once, nothing charged or paid twice, every paid week at the
provider once), and the leader kill says what it hit and how the cluster came back: a
writable primary on a new timeline, and every fencing token taken there above every one
of the old primary's.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from simulation.chaos import ChaosKind, chaos_schedule
from tests.scenarios.harness import HANG_GUARD_SECONDS, manage_at
from tests.scenarios.patroni_cluster import patroni_cluster

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

DATABASE = "tiffin_chaos_leader_kill"
START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)  # half an hour before the Sunday payout tick
DURATION = timedelta(minutes=60)  # at 60x, as tests/scenarios/test_chaos.py, for the same reasons
SEED = 1


def test_a_seeded_chaos_run_with_the_primary_killed_keeps_every_invariant(tmp_path: Path) -> None:
    with patroni_cluster() as cluster:
        cluster.leader().server.create_database(DATABASE)
        url = cluster.url(DATABASE)
        cluster.set_synchronous_mode(True)
        _manage(url, "migrate", "--noinput", "--verbosity", "0")
        _manage(url, "seed_demo", "--restaurants", "6", "--weeks", "2", "--now", START.isoformat())
        done = _manage(
            url, "simulate", "--start", START.isoformat(), "--duration", "60m", "--servers", "3", "--speed", "60",
            "--chaos", str(SEED), "--leader-kills", "1", "--json", "--log-dir", str(tmp_path), check=False,
        )  # fmt: skip
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n{done.stdout[-1500:]}"
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["duplicate_claims"] == 0 and report["duplicate_charges"] == 0 and report["payouts"]["duplicates"] == 0
    # The seed's own faults, unchanged, and the leader kill among them.
    schedule = chaos_schedule(seed=SEED, start=START, duration=DURATION, servers=3, leader_kills=1)
    records = report["chaos"]["faults"]
    assert [record["kind"] for record in records] == [str(fault.kind) for fault in schedule.faults]
    (kill,) = [record for record in records if record["kind"] == ChaosKind.LEADER_KILL]
    assert "took writes" in kill["line"], kill
    assert "tokens went up across it" in kill["recovery"], kill
    assert kill["recovery"].endswith("0 of an older epoch after the promotion"), kill


def _manage(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = manage_at(url, *args)
    if check:
        assert done.returncode == 0, done.stderr
    return done
