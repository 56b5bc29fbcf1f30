"""The alternatives to the claim, run for real (``simulate --strategy``): each one's
failure under the fault it cannot survive, and the claim under all of them at once.

Every execution of the strategy probe is a row of ``simulation_strategy_runs`` and its
charge is unguarded, so the counts below are read straight from the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from simulation.strategies import LEASE_SECONDS
from simulation.strategy_runner import DOWN_FOR, LONG_RUN_SECONDS, StrategyPlan
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from tests.scenarios.pooler import pgbouncer_binary
from tests.scenarios.redis_server import redis_for_scenarios

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)
# 20 simulated minutes at 120x: ten real seconds, room for the three faults in turn (faster,
# a loaded machine makes the claimed runs minutes late).
WINDOW = ("--start", START.isoformat(), "--duration", "20m", "--speed", "120", "--servers", "3")
TICKS = [START + timedelta(minutes=n) for n in range(20)]
END = START + timedelta(minutes=20)
# When the server-down fault is planned, as the runner plans it for WINDOW.
DOWN_AT = StrategyPlan(3, 2, START, END - START, 120.0, frozenset()).down_at
# Without faults, half as long.
SHORT = ("--duration", "10m")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_for_scenarios() as url:
        yield url


def simulate(scenario: Scenario, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``simulate`` over WINDOW (later arguments win) as JSON: the one strategy's result."""
    done = scenario.manage("simulate", *WINDOW, *args, "--json", "--log-dir", str(tmp_path), env=env)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    [result] = report["results"]
    return result


def charges(scenario: Scenario, ticks: list[datetime] = TICKS) -> dict[datetime, list[str]]:
    """Each tick's charging servers, over ``ticks``."""
    rows = scenario.db.rows(
        "SELECT scheduled_for, server FROM simulation_strategy_runs "
        "WHERE charged_at IS NOT NULL AND scheduled_for >= %s AND scheduled_for < %s ORDER BY scheduled_for, server",
        [ticks[0], ticks[-1] + timedelta(minutes=1)],
    )
    found: dict[datetime, list[str]] = {}
    for tick, server in rows:
        found.setdefault(tick, []).append(server)
    return found


def test_every_server_charges_three_times_per_tick(scenario: Scenario, tmp_path: Path) -> None:
    result = simulate(scenario, tmp_path, "--strategy", "every-server", "--strategy-faults", "none", *SHORT)
    ticks = TICKS[:10]
    assert charges(scenario, ticks) == {tick: ["server-1", "server-2", "server-3"] for tick in ticks}
    assert result["duplicate_charges"] == 2 * len(ticks) and result["exactly_once"] is False


def test_special_server_misses_the_ticks_while_it_is_down_and_nothing_alerts(
    scenario: Scenario, tmp_path: Path
) -> None:
    result = simulate(scenario, tmp_path, "--strategy", "special-server", "--strategy-faults", "server-down")
    [killed] = [line for line in result["events"] if "SIGKILL" in line]
    killed_at = START.replace(hour=int(killed[:2]), minute=int(killed[3:5]), second=int(killed[6:8]))
    charged = charges(scenario)
    # Server 1 went down between two ticks: the runner killed it once it had charged each
    # tick before the planned instant, however far a loaded machine's line lagged.
    assert killed_at >= DOWN_AT and all(charged.get(tick) == ["server-1"] for tick in TICKS if tick < DOWN_AT)
    # A tick that came due after that instant and before the kill may have been lost in
    # flight. The restarted line fired from the next tick by its own clock, after its boot:
    # no tick ran for the fault's five minutes, and every one from its first on ran once.
    fired_after = scenario.db.rows(
        "SELECT min(scheduled_for) FROM simulation_strategy_runs WHERE scheduled_for > %s", [killed_at]
    )
    back = fired_after[0][0] or END
    assert back > killed_at + DOWN_FOR
    assert all(charged.get(tick) == ["server-1"] for tick in TICKS if tick >= back), charged
    lost = [tick for tick in TICKS if tick <= killed_at and tick not in charged]  # due by the kill
    down = [tick for tick in TICKS if killed_at < tick < back]
    assert down and not set(down) & set(charged)
    # What is missed is exactly those: the ticks while it was down, and any lost in flight.
    assert result["missed"] == len(lost) + len(down) and result["duplicate_charges"] == 0
    # Nothing in that deployment knows what should have run: no alert, no record.
    assert result["noticed"] is False
    assert scenario.db.scalar("SELECT count(*) FROM job_run_alerts") == 0


def test_redis_lock_lets_a_second_server_in_during_a_run_longer_than_its_ttl(
    scenario: Scenario, tmp_path: Path, redis_url: str
) -> None:
    result = simulate(
        scenario, tmp_path, "--strategy", "redis-lock", "--strategy-faults", "long-run", env={"REDIS_URL": redis_url}
    )
    assert LONG_RUN_SECONDS > LEASE_SECONDS
    [(long_id, long_server, started, charged, stale)] = scenario.db.rows(
        "SELECT id, server, started_at, charged_at, stale FROM simulation_strategy_runs "
        "WHERE scheduled_for = %s ORDER BY charged_at - started_at DESC LIMIT 1",
        [START + timedelta(minutes=3)],  # the long-run tick: 15 % into the window
    )
    assert charged - started >= timedelta(seconds=LONG_RUN_SECONDS)
    # Its TTL ran out mid-run: a later tick's cron line took the lock and ran while it still
    # worked, and its own charge, written after the lock had passed on, was accepted. That
    # line may be on any server, its own included (each firing takes the lock with a fresh
    # token, and the three race for it at each tick), so only the overlap is asserted.
    overlapping = scenario.db.scalar(
        "SELECT count(*) FROM simulation_strategy_runs WHERE id <> %s AND started_at > %s AND started_at < %s",
        [long_id, started, charged],
    )
    assert overlapping >= 1, f"no execution started during {long_server}'s long run"
    assert stale is True and result["stale_accepted"] >= 1 and result["exactly_once"] is False


def test_advisory_lock_behind_a_transaction_pooler_lets_a_second_run_start(scenario: Scenario, tmp_path: Path) -> None:
    pgbouncer_binary()  # skips (fails in CI) without pgbouncer
    # The session lock stays on whichever server connection took it: another server's try
    # on that connection succeeds (a second run of one tick), tries elsewhere fail. With
    # PgBouncer's usual pool, whether two tries of one tick meet on that connection is up to
    # the pooler's pick and the machine's timing (a loaded machine saw none in ten ticks).
    # The injected fault decides it: PgBouncer keeps one server connection, so every try runs
    # in the session that holds the lock, and every server that fires a tick runs it.
    result = simulate(
        scenario,
        tmp_path,
        *("--strategy", "advisory-lock", "--pooler", "--pooler-connections", "1", "--strategy-faults", "none"),
        *SHORT,
    )
    twice = {tick: servers for tick, servers in charges(scenario, TICKS[:10]).items() if len(servers) > 1}
    assert twice, "no tick ran twice behind the pooler"
    assert result["duplicate_charges"] >= 1 and result["exactly_once"] is False


def test_the_claim_charges_once_per_tick_under_every_fault_behind_the_pooler(
    scenario: Scenario, tmp_path: Path
) -> None:
    pgbouncer_binary()
    result = simulate(scenario, tmp_path, "--strategy", "claim", "--pooler", "--strategy-faults", "all")
    events = " / ".join(result["events"])
    assert "pause: SIGSTOP worker-" in events and "server down: SIGKILL worker-1, scheduler-1" in events
    charged = charges(scenario)
    assert list(charged) == TICKS and all(len(servers) == 1 for servers in charged.values())
    assert result["missed"] == 0 and result["duplicate_charges"] == 0 and result["stale_accepted"] == 0
    # The paused worker's run was abandoned and re-run; its own late word was refused.
    assert result["stale_refused"] >= 1 and result["exactly_once"] is True
