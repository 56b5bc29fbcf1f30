"""The chaos fault schedule: drawn from the seed alone, every kind in every run, inside the
active window, never fewer than two servers, the provider's faults after the payout tick
(its commit faults right after the payout kill, the sender kill and provider-down later)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from simulation import chaos
from simulation.chaos import (
    _COMMIT_KINDS,
    _PROVIDER_KINDS,
    ALWAYS_DRAWN,
    COMMITS_AFTER_PAYOUT,
    DEFAULT_RATE,
    MAX_SKEW_SECONDS,
    PAYOUT_RETRIED,
    PROVIDER_QUIET_END,
    QUIET_END,
    QUIET_START,
    QUIET_START_LONGEST,
    ChaosKind,
    ChaosSchedule,
    chaos_schedule,
)
from simulation.chaos_table import _SHORT, parse_seeds
from simulation.probe_jobs import SETTLEMENT_TIMEOUT_SECONDS

START = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)  # a Sunday, half an hour before the payout tick
HOURS = timedelta(hours=3)


def _draw(
    seed: int, *, postgres: bool = True, duration: timedelta = HOURS, rate: float = DEFAULT_RATE
) -> ChaosSchedule:
    return chaos_schedule(seed=seed, start=START, duration=duration, servers=3, postgres=postgres, rate=rate)


def test_it_draws_the_same_schedule_from_the_same_seed_and_another_from_another() -> None:
    assert _draw(11) == _draw(11)
    assert _draw(11).lines() == _draw(11).lines()
    assert _draw(11).faults != _draw(12).faults


@pytest.mark.parametrize("seed", range(40))
def test_every_kind_comes_inside_the_active_window_and_two_servers_always_remain(seed: int) -> None:
    schedule = _draw(seed)
    assert {fault.kind for fault in schedule.faults} == set(ALWAYS_DRAWN)
    provider_side = (*_PROVIDER_KINDS, ChaosKind.SENDER_KILL)
    assert all(
        HOURS * QUIET_START <= f.at <= HOURS * (1 - QUIET_END) for f in schedule.faults if f.kind not in provider_side
    )
    assert all(f.at <= HOURS * (1 - PROVIDER_QUIET_END) for f in schedule.faults)
    assert [f.at for f in schedule.faults] == sorted(f.at for f in schedule.faults)
    assert schedule.max_skew <= MAX_SKEW_SECONDS and len(schedule.skews) == 3
    members = {1, 2, 3}
    (payout,) = [f for f in schedule.faults if f.kind == ChaosKind.PAYOUT_KILL]
    (sender,) = [f for f in schedule.faults if f.kind == ChaosKind.SENDER_KILL]
    assert sender.at == payout.at + PAYOUT_RETRIED  # once the payout run's retry wrote the transfers
    # The commit faults a second apart right after the payout kill (armed in turn before the
    # payout's transfers are first sent); provider-down after the sender kill.
    commits = [f for f in schedule.faults if f.kind in _COMMIT_KINDS]
    assert commits and [f.at for f in commits] == [payout.at + timedelta(seconds=n) for n in range(1, len(commits) + 1)]
    for fault in schedule.faults:
        if fault.kind in (*_PROVIDER_KINDS, ChaosKind.SENDER_KILL):  # aimed at the provider and the sender
            assert fault.server == 0 and (fault.kind in _COMMIT_KINDS or fault.at >= sender.at)
        elif fault.kind == ChaosKind.SERVER_JOIN:
            assert fault.server not in members
            members.add(fault.server)
        elif fault.kind == ChaosKind.SERVER_LEAVE:
            members.remove(fault.server)
        else:
            assert fault.server in members, fault
        assert len(members) >= 2
    pauses = [f.lasting for f in schedule.faults if f.kind == ChaosKind.WORKER_PAUSE]
    assert all(pause > timedelta(seconds=SETTLEMENT_TIMEOUT_SECONDS) for pause in pauses), "past the heartbeat timeout"


@pytest.mark.parametrize("seed", range(40))
def test_the_fault_count_scales_with_the_duration_and_an_hour_gets_one_of_every_kind(seed: int) -> None:
    hour = _draw(seed, duration=timedelta(hours=1))
    drawn = [kind for kind in ALWAYS_DRAWN if kind not in (ChaosKind.PAYOUT_KILL, ChaosKind.SENDER_KILL)]
    assert all(hour.by_kind()[kind] >= 1 for kind in drawn), hour.by_kind()
    assert len(hour.faults) == 16 + 2  # the default rate, and the payout and sender kills
    half_day = _draw(seed, duration=timedelta(hours=12))
    others = [kind for kind in drawn if kind not in _COMMIT_KINDS]
    assert all(half_day.by_kind()[kind] >= 17 for kind in others), half_day.by_kind()  # 12 x 16 // 11
    # The quiet start lasts at most QUIET_START_LONGEST, not 5 % (36 minutes) of 12 hours:
    # the 20:30 tick is inside the active window, with its payout and sender kills, and the
    # provider's faults come after it.
    assert len(half_day.faults) == 12 * 16 + 2
    assert half_day.by_kind()[ChaosKind.PAYOUT_KILL] == half_day.by_kind()[ChaosKind.SENDER_KILL] == 1
    assert all(fault.at >= QUIET_START_LONGEST for fault in half_day.faults)
    (payout,) = [f for f in half_day.faults if f.kind == ChaosKind.PAYOUT_KILL]
    assert all(f.at > payout.at for f in half_day.faults if f.kind in _PROVIDER_KINDS)
    assert len(_draw(seed, duration=timedelta(hours=1), rate=40).faults) == 40 + 2
    assert "16 per simulated hour" in hour.lines()[0]


@pytest.mark.parametrize("seed", [*range(40), 7319])
def test_a_long_run_keeps_a_handful_of_commit_faults_and_its_sender_kill_comes_after_them(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A twelve-hour run draws about 38 commit faults; spending them all on the payout's few
    # transfers took hours of backoff, and the sender kill behind them found every transfer
    # sent. At most COMMITS_AFTER_PAYOUT of them, one of each kind at least, come right after
    # the payout kill; the rest are other kinds, so the run has as many faults as before.
    for hours in (3, 6, 12):
        schedule = _draw(seed, duration=timedelta(hours=hours))
        assert len(schedule.faults) == hours * 16 + 2
        (payout,) = [f for f in schedule.faults if f.kind == ChaosKind.PAYOUT_KILL]
        (sender,) = [f for f in schedule.faults if f.kind == ChaosKind.SENDER_KILL]
        commits = [f for f in schedule.faults if f.kind in _COMMIT_KINDS]
        assert {f.kind for f in commits} == set(_COMMIT_KINDS)
        assert len(commits) <= COMMITS_AFTER_PAYOUT
        assert [f.at for f in commits] == [payout.at + timedelta(seconds=n) for n in range(1, len(commits) + 1)]
        assert all(f.at < sender.at for f in commits)
        assert sender.at == payout.at + PAYOUT_RETRIED
        downs = [f for f in schedule.faults if f.kind == ChaosKind.PROVIDER_DOWN]
        assert downs and all(sender.at <= f.at <= timedelta(hours=hours) * (1 - PROVIDER_QUIET_END) for f in downs)
    # An hour's run draws no more than that: its schedule is the one drawn without the cap.
    hour = _draw(seed, duration=timedelta(hours=1))
    assert 2 <= sum(f.kind in _COMMIT_KINDS for f in hour.faults) <= COMMITS_AFTER_PAYOUT
    capped = _draw(seed, duration=timedelta(hours=12))
    monkeypatch.setattr(chaos, "COMMITS_AFTER_PAYOUT", 1000)
    assert _draw(seed, duration=timedelta(hours=1)) == hour
    assert sum(f.kind in _COMMIT_KINDS for f in _draw(seed, duration=timedelta(hours=12)).faults) >= 2 * 17
    assert sum(f.kind in _COMMIT_KINDS for f in capped.faults) <= COMMITS_AFTER_PAYOUT


@pytest.mark.parametrize("rate", [0, -1, 121])
def test_a_fault_rate_out_of_range_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="faults per simulated hour"):
        _draw(1, rate=rate)


def test_the_payout_kill_pins_the_write_before_the_fastest_clock_claims_the_tick() -> None:
    (payout,) = [f for f in _draw(5).faults if f.kind == ChaosKind.PAYOUT_KILL]
    tick = datetime(2027, 3, 7, 20, 30, tzinfo=UTC)
    assert START + payout.at < tick - timedelta(seconds=MAX_SKEW_SECONDS)


def test_without_postgresql_nothing_needs_it_and_without_a_payout_tick_no_payout_kill() -> None:
    kinds = {fault.kind for fault in _draw(3, postgres=False).faults}
    assert ChaosKind.DB_TERMINATE not in kinds and ChaosKind.PAYOUT_KILL not in kinds
    assert ChaosKind.SENDER_KILL not in kinds  # its pin is a PostgreSQL row lock
    monday = chaos_schedule(seed=3, start=START + timedelta(days=1), duration=HOURS, servers=3)
    assert ChaosKind.PAYOUT_KILL not in {fault.kind for fault in monday.faults}


def test_the_table_names_every_kind_and_reads_seed_lists() -> None:
    assert list(_SHORT) == [str(kind) for kind in ChaosKind]
    assert parse_seeds("1-3,7") == [1, 2, 3, 7]
    with pytest.raises(ValueError):
        parse_seeds("a-b")


@pytest.mark.parametrize("seed", [1, 2, 7319])
def test_leader_kills_come_on_top_of_the_same_schedule_inside_the_active_window(seed: int) -> None:
    plain = _draw(seed)
    with_kills = chaos_schedule(seed=seed, start=START, duration=HOURS, servers=3, leader_kills=2)
    kills = [fault for fault in with_kills.faults if fault.kind == ChaosKind.LEADER_KILL]
    assert len(kills) == 2
    assert [fault for fault in with_kills.faults if fault.kind != ChaosKind.LEADER_KILL] == list(plain.faults)
    assert all(HOURS * QUIET_START <= fault.at <= HOURS * (1 - QUIET_END) for fault in kills)
    assert with_kills.skews == plain.skews
    assert ChaosKind.LEADER_KILL not in {fault.kind for fault in plain.faults}
