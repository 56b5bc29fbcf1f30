"""``make failover``'s verdict (tests/scenarios/failover_table.py): what makes it exit 1,
and its refusal of an unknown mode (exit 2, nothing started)."""

from __future__ import annotations

import pytest

from tests.scenarios.failover_table import HEADER, ModeResult, WebAnswers, main


def _result(mode: str, **figures: int) -> ModeResult:
    counts = {
        "claims_lost": 0,
        "ticks_run_again": 0,
        "ticks_run_twice": 0,
        "charges_made_again": 0,
        "tokens_repeated": 0,
        "transfers_doubled": 0,
        "orders_lost": 0,
        "orders_late": 0,
        "web_failures": 0,
        "web_down_after_back": 0,
    }
    return ModeResult(
        mode=mode,
        faults="kill",
        most_late_minutes=12.0,
        late_bound_minutes=2.0,
        web_back_seconds=3.0,
        recovery_seconds=2.5,
        **{**counts, **figures},
    )


def test_a_clean_synchronous_failover_passes() -> None:
    assert _result("synchronous").problems() == []


@pytest.mark.parametrize(
    "figure", ["claims_lost", "ticks_run_again", "ticks_run_twice", "charges_made_again", "orders_lost"]
)
def test_the_synchronous_mode_fails_when_it_loses_or_doubles_anything(figure: str) -> None:
    assert _result("synchronous", **{figure: 1}).problems()


def test_the_asynchronous_mode_may_lose_claims_but_never_repeat_a_token() -> None:
    lossy = _result("asynchronous", claims_lost=6, ticks_run_again=6, charges_made_again=6, orders_lost=9)
    assert lossy.problems() == []
    assert _result("asynchronous", tokens_repeated=1).problems() == ["1 tokens repeated"]


@pytest.mark.parametrize("mode", ["synchronous", "asynchronous"])
def test_a_transfer_doubled_at_the_provider_fails_either_mode(mode: str) -> None:
    assert _result(mode, transfers_doubled=1).problems() == ["1 transfers doubled at provider"]


@pytest.mark.parametrize("mode", ["synchronous", "asynchronous"])
def test_an_order_left_late_fails_either_mode(mode: str) -> None:
    assert _result(mode, orders_late=2).problems() == ["2 orders late"]


@pytest.mark.parametrize("mode", ["synchronous", "asynchronous"])
def test_a_web_request_failed_or_lost_again_fails_either_mode(mode: str) -> None:
    assert _result(mode, web_failures=1).problems() == ["1 web requests failed"]
    assert _result(mode, web_down_after_back=2).problems() == ["2 web answers lost the database again"]


def test_the_web_answers_count_from_the_kill() -> None:
    answers = [(1.0, "ok"), (2.0, "database down"), (3.0, "failed: HTTP 500"), (4.0, "ok"), (5.0, "database down")]
    web = WebAnswers(answers=answers)
    assert web.failures() == 1
    assert web.back_after(killed_at=1.5) == 2.5
    assert web.back_after(killed_at=0.5) == 3.5  # the answer on its way at the kill had the old primary
    assert WebAnswers(answers=[(1.0, "ok"), (2.0, "ok")]).back_after(killed_at=0.5) == 0.0  # never noticed
    assert web.down_after_back(killed_at=1.5) == 1
    assert WebAnswers(answers=answers[:3]).back_after(killed_at=1.5) is None
    assert web.story(killed_at=1.5) == "database down 1.0 s, failed: HTTP 500 1.0 s, ok 1.0 s, database down 0.0 s"


def test_a_row_has_every_column() -> None:
    row = _result("asynchronous", claims_lost=6, orders_lost=3).row()
    orders = "| 3 | 0 (latest 12 min past, 2 min allowed beyond the outage) "
    assert (
        row
        == "| asynchronous | kill | 6 | 0 | 0 | 0 | 0 | 0 "
        + orders
        + "| 0 failed, back in 3.0 s, 0 down after | 2.5 s |"
    )
    assert row.count("|") == HEADER.splitlines()[0].count("|")


def test_an_unknown_mode_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--modes", "quorum"]) == 2
    assert "unknown mode(s) ['quorum']" in capsys.readouterr().err
