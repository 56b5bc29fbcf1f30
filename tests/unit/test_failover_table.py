"""``make failover``'s verdict (tests/scenarios/failover_table.py): what makes it exit 1,
and its refusal of an unknown mode (exit 2, nothing started)."""

from __future__ import annotations

import pytest

from tests.scenarios.failover_table import ModeResult, main


def _result(mode: str, **figures: int) -> ModeResult:
    counts = {
        "claims_lost": 0,
        "ticks_run_again": 0,
        "ticks_run_twice": 0,
        "charges_made_again": 0,
        "tokens_repeated": 0,
        "transfers_doubled": 0,
    }
    return ModeResult(mode=mode, faults="kill", recovery_seconds=2.5, **{**counts, **figures})


def test_a_clean_synchronous_failover_passes() -> None:
    assert _result("synchronous").problems() == []


@pytest.mark.parametrize("figure", ["claims_lost", "ticks_run_again", "ticks_run_twice", "charges_made_again"])
def test_the_synchronous_mode_fails_when_it_loses_or_doubles_anything(figure: str) -> None:
    assert _result("synchronous", **{figure: 1}).problems()


def test_the_asynchronous_mode_may_lose_claims_but_never_repeat_a_token() -> None:
    lossy = _result("asynchronous", claims_lost=6, ticks_run_again=6, charges_made_again=6)
    assert lossy.problems() == []
    assert _result("asynchronous", tokens_repeated=1).problems() == ["1 tokens repeated"]


@pytest.mark.parametrize("mode", ["synchronous", "asynchronous"])
def test_a_transfer_doubled_at_the_provider_fails_either_mode(mode: str) -> None:
    assert _result(mode, transfers_doubled=1).problems() == ["1 transfers doubled at provider"]


def test_a_row_has_every_column() -> None:
    row = _result("asynchronous", claims_lost=6).row()
    assert row == "| asynchronous | kill | 6 | 0 | 0 | 0 | 0 | 0 | 2.5 s |"


def test_an_unknown_mode_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--modes", "quorum"]) == 2
    assert "unknown mode(s) ['quorum']" in capsys.readouterr().err
