"""The provider sandbox, run as a real process (``python -m provider_sandbox``) and spoken
to through the official ``stripe`` library, never a mock of it: Stripe's idempotency
semantics, its list pagination, state across a restart, and each fault as documented in
docs/provider-sandbox.md."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stripe

from simulation.provider_process import RunningSandbox, running_sandbox, start_sandbox
from support.processes import PROJECT_DIR, stop_group, wait_for

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(180)]

KEY = "sk_test_sandbox"


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[RunningSandbox]:
    with running_sandbox(state_path=tmp_path / "provider.sqlite3", log_path=tmp_path / "provider.log") as running:
        yield running


def client(sandbox: RunningSandbox, *, retries: int = 0, timeout: float = 10.0) -> stripe.StripeClient:
    return stripe.StripeClient(
        KEY,
        base_addresses={"api": sandbox.url},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def transfer_params(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "amount": 123456,
        "currency": "inr",
        "destination": "acct_1Restaurant7",
        "transfer_group": "payout-7-2026-11-30",
        "metadata": {"restaurant": "7", "period_start": "2026-11-30"},
    }
    params.update(changes)
    return params


def create(
    stripe_client: stripe.StripeClient, key: str, *, fault: str = "", delay_ms: int | None = None, **changes: Any
) -> stripe.Transfer:
    headers = {"Sandbox-Fault": fault} if fault else {}
    if delay_ms is not None:
        headers["Sandbox-Fault-Delay-Ms"] = str(delay_ms)
    return stripe_client.v1.transfers.create(
        params=transfer_params(**changes),  # type: ignore[arg-type]
        options={"idempotency_key": key, "headers": headers},
    )


def replayed(transfer: stripe.Transfer) -> bool:
    response = transfer.last_response
    assert response is not None
    return response.headers.get("Idempotent-Replayed") == "true"


def all_transfers(stripe_client: stripe.StripeClient, **params: Any) -> list[stripe.Transfer]:
    return list(stripe_client.v1.transfers.list(params={"limit": 100, **params}).auto_paging_iter())  # type: ignore[arg-type, typeddict-item]


# --- The transfer and Stripe's idempotency -------------------------------------------


def test_a_transfer_is_created_as_stripe_returns_it_and_its_key_replays_it(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    first = create(stripe_client, "payout-7-2026-11-30")
    assert first.id.startswith("tr_")
    assert (first.object, first.amount, first.currency, first.destination) == (
        "transfer",
        123456,
        "inr",
        "acct_1Restaurant7",
    )
    assert first.transfer_group == "payout-7-2026-11-30"
    assert first.metadata.to_dict() == {"restaurant": "7", "period_start": "2026-11-30"}
    assert (first.reversed, first.livemode) == (False, False)
    assert abs(first.created - time.time()) < 60
    assert not replayed(first)

    again = create(stripe_client, "payout-7-2026-11-30")
    assert again.id == first.id
    assert replayed(again)
    assert again.last_response is not None and first.last_response is not None
    assert again.last_response.headers["Original-Request"] == first.last_response.request_id
    assert stripe_client.v1.transfers.retrieve(first.id).amount == 123456
    assert sandbox.state()["transfers"] == 1


def test_a_key_reused_with_another_amount_is_refused(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    create(stripe_client, "the-key")
    with pytest.raises(stripe.IdempotencyError) as refused:
        create(stripe_client, "the-key", amount=123457)
    assert refused.value.http_status == 400
    assert "same parameters" in str(refused.value)
    assert sandbox.state()["transfers"] == 1


def test_a_key_is_refused_on_another_endpoint_and_when_too_long(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    create(stripe_client, "k")
    request = urllib.request.Request(
        f"{sandbox.url}/v1/transfers/tr_x/reversals",
        data=b"amount=1",
        headers={"Authorization": f"Bearer {KEY}", "Idempotency-Key": "k"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    error = json.loads(refused.value.read())["error"]
    assert error["type"] == "idempotency_error" and "same endpoint" in error["message"]
    with pytest.raises(stripe.InvalidRequestError) as too_long:
        create(stripe_client, "k" * 256)
    assert too_long.value.param == "Idempotency-Key"
    assert sandbox.state()["transfers"] == 1


def test_a_request_while_another_holds_its_key_gets_409(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    first: list[stripe.Transfer] = []
    slow = threading.Thread(target=lambda: first.append(create(stripe_client, "busy", fault="slow", delay_ms=2000)))
    slow.start()
    try:
        wait_for(lambda: sandbox.state()["in_flight"] == 1, timeout=10, what="the slow request holding its key")
        with pytest.raises(stripe.APIError) as conflict:
            create(stripe_client, "busy")
        assert conflict.value.http_status == 409
        body: Any = conflict.value.json_body  # APIError carries no code; its body has it
        assert body["error"]["code"] == "idempotency_key_in_use"
    finally:
        slow.join(timeout=30)
    assert len(first) == 1 and not replayed(first[0])
    assert replayed(create(stripe_client, "busy"))
    assert sandbox.state()["transfers"] == 1


def test_concurrent_requests_with_one_key_make_one_transfer(sandbox: RunningSandbox) -> None:
    """The library retries a 409 (with backoff); each retry then replays the one transfer."""
    stripe_client = client(sandbox, retries=5)
    ids: list[str] = []
    errors: list[BaseException] = []

    def send(index: int) -> None:
        try:
            fault = "slow" if index == 0 else ""
            ids.append(create(stripe_client, "same", fault=fault, delay_ms=300).id)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=send, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(ids) == 8 and len(set(ids)) == 1
    assert sandbox.state()["transfers"] == 1


def test_a_key_is_forgotten_after_the_retention_and_then_pays_again(sandbox: RunningSandbox) -> None:
    """The danger the outbox must avoid: a blind retry after the retention pays twice."""
    stripe_client = client(sandbox)
    first = create(stripe_client, "old-key")
    sandbox.advance_clock(86_400 - 60)
    assert create(stripe_client, "old-key").id == first.id
    sandbox.advance_clock(120)
    second = create(stripe_client, "old-key")
    assert second.id != first.id and not replayed(second)
    assert sandbox.state()["transfers"] == 2
    assert {t.id for t in all_transfers(stripe_client, transfer_group="payout-7-2026-11-30")} == {first.id, second.id}


def test_a_refused_request_stores_nothing_under_its_key(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    with pytest.raises(stripe.InvalidRequestError) as refused:
        create(stripe_client, "k", destination="ba_123")
    assert refused.value.param == "destination"
    with pytest.raises(stripe.InvalidRequestError) as refused:
        create(stripe_client, "k", amount=0)
    assert refused.value.param == "amount"
    assert sandbox.state()["transfers"] == 0
    assert not replayed(create(stripe_client, "k"))


def test_an_amount_over_eight_digits_is_refused_as_stripe_refuses_it(sandbox: RunningSandbox) -> None:
    """Stripe's amounts are at most 99,999,999 minor units: one more is a 400
    ``amount_too_large`` in Stripe's error shape, and nothing is stored under the key."""
    stripe_client = client(sandbox)
    with pytest.raises(stripe.InvalidRequestError) as refused:
        create(stripe_client, "big", amount=100_000_000)
    error = refused.value
    assert (error.http_status, error.code, error.param) == (400, "amount_too_large", "amount")
    assert isinstance(error.json_body, dict) and error.json_body["error"]["type"] == "invalid_request_error"
    assert sandbox.state()["transfers"] == 0
    assert create(stripe_client, "big", amount=99_999_999).amount == 99_999_999  # the most, and the key is free


def test_only_test_secret_keys_are_accepted(sandbox: RunningSandbox) -> None:
    for api_key in ("pk_test_abc", "sk_live_abc"):
        stranger = stripe.StripeClient(api_key, base_addresses={"api": sandbox.url}, max_network_retries=0)
        with pytest.raises(stripe.AuthenticationError):
            stranger.v1.transfers.list()
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client(sandbox).v1.transfers.retrieve("tr_unknown")
    assert (missing.value.http_status, missing.value.code) == (404, "resource_missing")


# --- Lists -------------------------------------------------------------------------


def test_lists_page_newest_first_with_the_filters(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    made = []
    for index in range(25):
        group = "even" if index % 2 == 0 else "odd"
        destination = "acct_A" if index < 20 else "acct_B"
        made.append(
            create(stripe_client, f"k{index}", amount=100 + index, transfer_group=group, destination=destination)
        )
        if index == 9:
            sandbox.advance_clock(3600)
    newest_first = [t.id for t in reversed(made)]

    page = stripe_client.v1.transfers.list()
    assert [t.id for t in page.data] == newest_first[:10]
    assert page.has_more and page.url == "/v1/transfers"
    after = stripe_client.v1.transfers.list(params={"limit": 10, "starting_after": page.data[-1].id})
    assert [t.id for t in after.data] == newest_first[10:20]
    before = stripe_client.v1.transfers.list(params={"limit": 3, "ending_before": after.data[0].id})
    assert [t.id for t in before.data] == newest_first[7:10] and before.has_more
    last = stripe_client.v1.transfers.list(params={"limit": 10, "starting_after": after.data[-1].id})
    assert [t.id for t in last.data] == newest_first[20:] and not last.has_more
    assert [t.id for t in all_transfers(stripe_client)] == newest_first

    assert [t.id for t in all_transfers(stripe_client, transfer_group="odd")] == newest_first[1::2]
    assert len(all_transfers(stripe_client, destination="acct_B")) == 5
    boundary = made[10].created
    assert len(all_transfers(stripe_client, created={"gte": boundary})) == 15
    assert len(all_transfers(stripe_client, created={"lt": boundary})) == 10
    assert len(all_transfers(stripe_client, created={"gt": made[9].created, "lte": made[24].created})) == 15
    assert len(all_transfers(stripe_client, created=made[24].created)) >= 1
    with pytest.raises(stripe.InvalidRequestError):
        stripe_client.v1.transfers.list(params={"limit": 101})
    with pytest.raises(stripe.InvalidRequestError):
        stripe_client.v1.transfers.list(params={"starting_after": "tr_unknown"})


def test_a_restart_after_sigkill_keeps_the_transfers_and_the_keys(tmp_path: Path) -> None:
    state = tmp_path / "provider.sqlite3"
    with running_sandbox(state_path=state) as before:
        first = create(client(before), "survives")
        before.advance_clock(600)
        stop_group(before.popen, grace=0, sig=signal.SIGKILL)  # no clean shutdown: each commit was synced
    with running_sandbox(state_path=state) as after:
        stripe_client = client(after)
        assert [t.id for t in all_transfers(stripe_client)] == [first.id]
        again = create(stripe_client, "survives")
        assert again.id == first.id and replayed(again)
        assert after.state()["clock_offset_seconds"] == 600


# --- Faults ------------------------------------------------------------------------


def test_commit_then_timeout_commits_and_a_retry_replays(sandbox: RunningSandbox) -> None:
    impatient = client(sandbox, timeout=1.0)
    with pytest.raises(stripe.APIConnectionError):
        create(impatient, "lost-answer", fault="commit-then-timeout", delay_ms=5000)
    stripe_client = client(sandbox)
    [committed] = all_transfers(stripe_client)
    again = create(stripe_client, "lost-answer")
    assert again.id == committed.id and replayed(again)


def test_commit_then_500_commits_and_a_retry_replays(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    with pytest.raises(stripe.APIError) as failed:
        create(stripe_client, "k", fault="commit-then-500")
    assert failed.value.http_status == 500
    assert sandbox.state()["transfers"] == 1
    assert replayed(create(stripe_client, "k"))


def test_500_before_commit_and_a_dropped_connection_leave_nothing(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    with pytest.raises(stripe.APIError) as failed:
        create(stripe_client, "k", fault="500-before-commit")
    assert failed.value.http_status == 500
    with pytest.raises(stripe.APIConnectionError):
        create(stripe_client, "k", fault="drop")
    assert sandbox.state()["transfers"] == 0
    assert not replayed(create(stripe_client, "k"))
    assert sandbox.state()["transfers"] == 1


def test_the_library_retries_an_armed_500_with_the_same_key(sandbox: RunningSandbox) -> None:
    """An armed fault counts requests: one commit-then-500, then the library's own retry
    (same Idempotency-Key) replays the committed transfer."""
    sandbox.arm_fault("commit-then-500", count=1, methods=("POST",))
    stripe_client = client(sandbox, retries=2)
    assert stripe_client.v1.transfers.list().data == []  # a GET does not take a POST's fault
    transfer = create(stripe_client, "k")
    assert replayed(transfer)
    assert sandbox.state()["transfers"] == 1 and sandbox.state()["fault"] is None


def test_faults_armed_then_act_in_turn_and_arming_without_then_replaces_them(sandbox: RunningSandbox) -> None:
    """Two faults queued (``then``): the first's count, then the second's, then none."""
    sandbox.arm_fault("commit-then-500", count=1, methods=("POST",))
    sandbox.arm_fault("500-before-commit", count=1, methods=("POST",), then=True)
    assert [f["mode"] for f in sandbox.state()["faults"]] == ["commit-then-500", "500-before-commit"]
    stripe_client = client(sandbox)
    for key, committed in (("a", 1), ("b", 1)):  # committed then 500; refused before committing
        with pytest.raises(stripe.APIError):
            create(stripe_client, key)
        assert sandbox.state()["transfers"] == committed
    assert sandbox.state()["faults"] == [] and sandbox.state()["fault"] is None
    assert not replayed(create(stripe_client, "b"))
    sandbox.arm_fault("down", then=True)
    sandbox.arm_fault("slow", count=2, delay_ms=10)  # replaces the down
    assert [f["mode"] for f in sandbox.state()["faults"]] == ["slow"]


def test_slow_answers_take_their_delay(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    started = time.monotonic()
    create(stripe_client, "k", fault="slow", delay_ms=700)
    assert time.monotonic() - started >= 0.7
    sandbox.arm_fault("slow", count=1, delay_ms=500, methods=("GET",))
    started = time.monotonic()
    stripe_client.v1.transfers.list()
    assert time.monotonic() - started >= 0.5


def test_the_latency_option_delays_every_api_request(tmp_path: Path) -> None:
    with running_sandbox(state_path=tmp_path / "provider.sqlite3", latency_ms=400) as slow:
        stripe_client = client(slow)
        for call in (lambda: create(stripe_client, "k"), stripe_client.v1.transfers.list):
            started = time.monotonic()
            call()
            assert time.monotonic() - started >= 0.4
        assert slow.state()["latency_ms"] == 400


def test_down_refuses_every_request_until_cleared(sandbox: RunningSandbox) -> None:
    stripe_client = client(sandbox)
    sandbox.arm_fault("down")
    for _ in range(3):
        with pytest.raises(stripe.APIError) as refused:
            create(stripe_client, "k")
        assert refused.value.http_status == 503
    with pytest.raises(stripe.APIError):
        stripe_client.v1.transfers.list()
    assert sandbox.state()["fault"]["mode"] == "down"
    sandbox.clear_fault()
    assert not replayed(create(stripe_client, "k"))
    assert sandbox.state()["transfers"] == 1


# --- The command ---------------------------------------------------------------------


def sandbox_command(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provider_sandbox", *arguments],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_bad_arguments_exit_non_zero_with_a_message(tmp_path: Path) -> None:
    state = str(tmp_path / "s.sqlite3")
    retention = sandbox_command("--port", "0", "--state", state, "--key-retention", "0")
    assert retention.returncode == 2 and "--key-retention must be positive" in retention.stderr
    directory = sandbox_command("--port", "0", "--state", str(tmp_path / "missing" / "s.sqlite3"))
    assert directory.returncode == 2 and "does not exist" in directory.stderr
    assert not (tmp_path / "s.sqlite3").exists()


def test_two_sandboxes_cannot_share_a_state_file(tmp_path: Path) -> None:
    state = tmp_path / "s.sqlite3"
    first = start_sandbox(state_path=state)
    try:
        second = sandbox_command("--port", "0", "--state", str(state))
        assert second.returncode == 2 and "another sandbox" in second.stderr
        with pytest.raises(RuntimeError, match="did not start"):
            start_sandbox(state_path=state, log_path=tmp_path / "second.log")
        assert "another sandbox" in (tmp_path / "second.log").read_text()
    finally:
        first.stop()


def test_the_controls_refuse_bad_input_and_change_nothing(sandbox: RunningSandbox) -> None:
    bad: list[tuple[str, dict[str, Any]]] = [
        ("/_sandbox/faults", {"mode": "sometimes"}),
        ("/_sandbox/faults", {"mode": "down", "count": 0}),
        ("/_sandbox/faults", {"mode": "slow", "delay_ms": -1}),
        ("/_sandbox/clock", {"advance_seconds": -5}),
    ]
    for path, payload in bad:
        with pytest.raises(urllib.error.HTTPError) as refused:
            sandbox.control("POST", path, payload)
        assert refused.value.code == 400
        assert json.loads(refused.value.read())["error"]["message"]
    state = sandbox.state()
    assert state["fault"] is None and state["clock_offset_seconds"] == 0
    with pytest.raises(stripe.InvalidRequestError):
        create(client(sandbox), "k", fault="sometimes")
