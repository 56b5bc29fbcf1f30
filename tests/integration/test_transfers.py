"""Transfers: every payout with a positive net leaves exactly once, against the REAL
provider sandbox (``python -m provider_sandbox`` in its own process group, spoken to
through the official ``stripe`` library) and PostgreSQL.

Each test ends by comparing the provider's transfers with the ledger: every payout with
a positive net exactly one transfer of the same amount to the same destination, and no
other transfer. The sender's clock is passed in (``read_clock``); the sandbox's clock is
advanced through its control endpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import stripe
import time_machine
from django.db import IntegrityError, NotSupportedError, connections, transaction
from django.urls import reverse

from operations.monitoring import CheckWindow
from orders.models import OrderStatus, Restaurant
from payouts.models import Payout
from payouts.services import payouts_pay_due
from scheduling.models import JobRun, RunAlert, RunStatus
from scheduling.services import run_execute_here
from simulation.provider_process import RunningSandbox, running_sandbox
from tests.fences import TokenOnly
from tests.outbox import AS_OF, PAID_AT, Clock, due_again, paid_restaurants, sender_run
from tests.prometheus import scrape
from tiffin.money import to_minor_units
from transfers import provider
from transfers.errors import InexactAmountError, TransferError
from transfers.jobs import transfers_not_sent, transfers_reconciled
from transfers.models import RECONCILE_TRANSFERS_JOB, SEND_TRANSFERS_JOB, Transfer, TransferStatus
from transfers.reconciliation import transfers_reconcile
from transfers.services import (
    SendResult,
    transfer_retry,
    transfer_send,
    transfers_attempts_begin,
    transfers_send_due,
)

pytestmark = [pytest.mark.postgres, pytest.mark.scenario, pytest.mark.timeout(180)]

RETENTION = 86400


@pytest.fixture
def sandbox(tmp_path: Path, settings: Any) -> Iterator[RunningSandbox]:
    with running_sandbox(state_path=tmp_path / "provider.sqlite3", log_path=tmp_path / "provider.log") as running:
        settings.PAYMENT_PROVIDER_URL = running.url
        settings.PAYMENT_PROVIDER_KEY = "sk_test_tiffin"
        settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS = 1.0
        settings.PAYMENT_PROVIDER_KEY_RETENTION_SECONDS = RETENTION
        settings.TRANSFERS_RETRY_BASE_SECONDS = 30.0
        settings.TRANSFERS_LOOKUP_QUIET_SECONDS = 900
        settings.PAYMENT_CURRENCY = "inr"
        yield running


@pytest.fixture
def paid(restaurant_factory: Any, order_factory: Any) -> Callable[..., list[Restaurant]]:
    """``count`` Kolkata restaurants connected to the provider, each with orders in the
    weeks of 8 and 15 March (two transfers each) and none in the week of 1 March (a zero
    payout, no transfer); then the weekly-payouts run as of AS_OF."""

    def make(count: int = 1, *, connected: bool = True) -> list[Restaurant]:
        return paid_restaurants(
            restaurant_factory,
            order_factory,
            count=count,
            orders=lambda number: ((10, "1049.38"), (16, f"{200 + number}.05")),
            fields=lambda restaurant: {"provider_account": f"acct_Tiffin{restaurant.id}"} if connected else {},
        )

    return make


def stripe_client() -> stripe.StripeClient:
    return provider.provider_client()


def assert_provider_matches_ledger() -> None:
    """Each payout with a positive net: exactly one transfer at the provider, of its net
    in minor units, to its restaurant's account; and no transfer the ledger does not know."""
    held = provider.transfers_all(client=stripe_client())
    payouts = Payout.objects.filter(net__gt=0).select_related("restaurant", "transfer")
    expected = {payout.transfer.transfer_group: payout for payout in payouts}
    assert sorted(item.transfer_group for item in held) == sorted(expected)  # one each, none unknown
    for item in held:
        payout = expected[item.transfer_group]
        assert item.amount == to_minor_units(payout.net, "inr")
        assert item.destination == payout.restaurant.provider_account
        assert payout.transfer.status == TransferStatus.SENT and payout.transfer.provider_id == item.id
    # And the daily reconciliation, which compares the same two records, finds nothing.
    found = transfers_reconcile(
        client=stripe_client(), now=PAID_AT + timedelta(days=5), created_since=None, grace=timedelta(days=1)
    )
    assert (found.mismatches, found.matched) == ([], len(expected))


def send_one(transfer: Transfer, clock: Clock, *, fence: int = 1) -> SendResult:
    client = stripe_client()
    return transfer_send(transfer_id=transfer.id, fence=fence, job_run_id=None, client=client, read_clock=clock)


def answer_lost(sandbox: RunningSandbox, paid: Callable[..., list[Restaurant]]) -> tuple[Transfer, Clock]:
    """One payout's transfer whose first request the provider committed and never answered
    in time: it is retrying, and the provider holds it under its key."""
    paid(1)
    transfer = Transfer.objects.order_by("id").first()
    assert transfer is not None
    clock = Clock(PAID_AT)
    sandbox.arm_fault("commit-then-timeout", count=1, methods=("POST",), delay_ms=3000)
    assert send_one(transfer, clock) == SendResult.RETRYING
    return transfer, clock


def wait_for(condition: Callable[[], bool], *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


# --- Written with the payout ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_payout_run_writes_one_pending_transfer_per_positive_payout(paid) -> None:
    [restaurant] = paid(1)
    payouts = list(Payout.objects.filter(restaurant=restaurant).order_by("period_start"))
    assert [p.net > 0 for p in payouts] == [False, True, True]  # the first week had no orders
    transfers = list(Transfer.objects.order_by("period_start"))
    assert [t.payout_id for t in transfers] == [p.id for p in payouts[1:]]
    first = transfers[0]
    assert first.amount_minor == 89197  # 1049.38 less 15 % (157.41), in paise, exactly
    assert (first.currency, first.destination, first.status) == ("inr", f"acct_Tiffin{restaurant.id}", "pending")
    assert first.idempotency_key == first.transfer_group == f"payout-{restaurant.id}-20270307T183000Z"
    assert first.next_attempt_at == PAID_AT


@pytest.mark.django_db(transaction=True)
def test_an_amount_that_is_not_whole_minor_units_refuses_the_payout_and_its_transfer(
    restaurant_factory, order_factory, settings
) -> None:
    """Atomicity: a transfer that cannot be written rolls its payout back with it."""
    settings.PAYMENT_CURRENCY = "jpy"  # no minor unit: 891.97 yen is not an amount
    restaurant = restaurant_factory(onboarded_at=datetime(2027, 3, 1, tzinfo=UTC))
    placed_at = datetime(2027, 3, 10, tzinfo=UTC)
    order_factory(OrderStatus.DELIVERED, restaurant=restaurant, total=Decimal("1049.38"), placed_at=placed_at)
    with pytest.raises(InexactAmountError, match=r"891\.97 jpy is not a whole number"):
        payouts_pay_due(as_of=AS_OF, run=TokenOnly(fence=1, now=PAID_AT), now=PAID_AT)
    assert (Payout.objects.count(), Transfer.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_a_transfer_cannot_exist_without_its_payout(paid) -> None:
    """The other way round: the database refuses a transfer whose payout identity (restaurant,
    period start) is not in the ledger (transfers/migrations/0003's triggers, in place of the foreign key):
    moved to a period without a payout, inserted without one, or its payouts truncated
    from under it."""
    paid(1)
    transfer = Transfer.objects.order_by("id").first()
    assert transfer is not None
    orphan = datetime(2030, 1, 6, 18, 30, tzinfo=UTC)
    with pytest.raises(IntegrityError, match="transfer_payout_identity_fk"), transaction.atomic():
        Transfer.objects.filter(id=transfer.id).update(period_start=orphan)
    assert Transfer.objects.filter(period_start=orphan).count() == 0
    with pytest.raises(IntegrityError, match="transfer_payout_identity_fk"), transaction.atomic():
        Transfer.objects.create(
            **{f.attname: getattr(transfer, f.attname) for f in Transfer._meta.concrete_fields if not f.primary_key}
            | {"payout_id": transfer.payout_id + 1000, "period_start": orphan, "idempotency_key": "orphan"}
        )
    assert Transfer.objects.filter(period_start=orphan).count() == 0
    with connections["default"].cursor() as cursor:
        with pytest.raises(NotSupportedError, match="transfer_payout_identity_fk"), transaction.atomic():
            cursor.execute("TRUNCATE payouts_payout")
        with transaction.atomic():
            cursor.execute("TRUNCATE payouts_payout, transfers_transfer")  # together, as ledger_wipe does
    assert (Payout.objects.count(), Transfer.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_a_transfer_still_unsent_after_the_grace_is_a_problem_of_check_runs(paid, settings) -> None:
    """Without a restaurant's account nothing leaves: after a day each paid week without its
    transfer is reported, whatever the provider says or cannot say. (The check reads only
    the outbox: the provider at this address is never called.)"""
    settings.PAYMENT_PROVIDER_URL = "http://127.0.0.1:9"
    paid(1, connected=False)
    assert transfers_not_sent(CheckWindow.ending(PAID_AT + timedelta(hours=23))) == []
    problems = transfers_not_sent(CheckWindow.ending(PAID_AT + timedelta(hours=25)))
    assert sorted(p.subject for p in problems) == sorted(
        f"transfer:{key}" for key in Transfer.objects.values_list("idempotency_key", flat=True)
    )
    assert all("Waiting for the restaurant's provider account" in p.detail for p in problems)


@pytest.mark.django_db(transaction=True)
def test_with_no_provider_configured_waiting_transfers_are_not_late(paid, settings) -> None:
    """No provider (a laptop, the demo): nothing could have been sent, so nothing is late;
    `check --deploy` is where a server without one is warned (tiffin.W002)."""
    settings.PAYMENT_PROVIDER_URL = ""
    paid(1, connected=False)
    assert Transfer.objects.exists()
    assert transfers_not_sent(CheckWindow.ending(PAID_AT + timedelta(days=3))) == []


# --- Sending ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_send_transfers_job_sends_them_all(sandbox, paid) -> None:
    paid(3)
    # The send-transfers tick of the payout run's minute, claimed and executed here.
    tick = PAID_AT.replace(second=0)
    run = sender_run(SEND_TRANSFERS_JOB, scheduled_for=tick, at=PAID_AT + timedelta(seconds=10))
    assert run.result == {"attached": 0, "sent": 6}
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_a_restaurant_without_an_account_waits_then_is_paid_once_connected(sandbox, paid) -> None:
    [restaurant] = paid(1, connected=False)
    assert set(Transfer.objects.values_list("status", flat=True)) == {TransferStatus.WAITING_ACCOUNT}
    clock = Clock(PAID_AT)
    assert transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10).counts == {}
    Restaurant.objects.filter(id=restaurant.id).update(provider_account="acct_Connected1")
    result = transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10)
    assert (result.attached, result.counts) == (2, {"sent": 2})
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", ["commit-then-timeout", "commit-then-500"])
def test_an_answer_lost_after_the_provider_committed_is_retried_with_the_same_key(sandbox, paid, fault) -> None:
    paid(1)
    transfer = Transfer.objects.order_by("id").first()
    assert transfer is not None
    clock = Clock(PAID_AT)
    sandbox.arm_fault(fault, count=1, methods=("POST",), delay_ms=3000)
    assert send_one(transfer, clock) == SendResult.RETRYING
    assert sandbox.state()["transfers"] == 1  # it did happen; the sender cannot know
    transfer.refresh_from_db()
    assert (transfer.status, transfer.attempts) == (TransferStatus.PENDING, 1)
    assert fault.endswith("500") == ("(500)" in transfer.last_error)
    # Not due before its backoff; then the same key replays the committed transfer.
    assert send_one(transfer, clock) == SendResult.NOT_DUE
    clock.at = due_again(transfer)
    assert send_one(transfer, clock) == SendResult.SENT
    assert sandbox.state()["transfers"] == 1
    # The rest of the run's transfers go too; the provider holds one per payout.
    transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=4, batch_size=10)
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("made", [0, 3, 6, 7, 200], ids=lambda made: f"{made}-made")
def test_an_attempt_is_due_again_after_its_lease_and_its_capped_backoff(paid, settings, made: int) -> None:
    # One statement begins a batch's attempts on PostgreSQL, the backoff's due times passed
    # as an array up to its cap: an attempt past the array's end takes the cap too.
    settings.TRANSFERS_RETRY_BASE_SECONDS, settings.TRANSFERS_RETRY_MAX_SECONDS = 60, 3600
    paid(1)
    transfer = Transfer.objects.order_by("id").first()
    assert transfer is not None
    Transfer.objects.filter(id=transfer.id).update(attempts=made, next_attempt_at=PAID_AT)
    taken = transfers_attempts_begin(transfer_ids=[transfer.id], fence=1, job_run_id=None, now=PAID_AT)
    assert len(taken) == 1
    transfer.refresh_from_db()
    lease = timedelta(seconds=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS)
    assert transfer.attempts == made + 1
    assert transfer.next_attempt_at == PAID_AT + lease + timedelta(seconds=min(60 * 2**made, 3600))
    assert transfer.first_attempt_at == PAID_AT


@pytest.mark.django_db(transaction=True)
def test_a_provider_down_for_an_hour_is_retried_with_backoff_then_pays_each_week_once(sandbox, paid) -> None:
    paid(2)
    clock = Clock(PAID_AT)
    sandbox.arm_fault("down")
    passes = []
    while clock.at < PAID_AT + timedelta(hours=1):
        passes.append(transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=4, batch_size=10))
        clock.advance(minutes=1)  # the job's cron
    attempts = sorted(Transfer.objects.values_list("attempts", flat=True))
    # Backoff (timeout 1 s + 30 s x 2^(n-1)), a pass a minute: attempts at minutes 0, 1, 3, 6, 11, 20, 37.
    assert attempts == [7, 7, 7, 7], attempts
    assert sum(p.counts.get("retrying", 0) for p in passes) == 28 and sandbox.state()["transfers"] == 0
    sandbox.clear_fault()
    clock.advance(hours=1)
    assert transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=4, batch_size=10).counts == {
        "sent": 4
    }
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_two_senders_at_once_make_one_transfer_each(sandbox, paid) -> None:
    """Two runs, different fences, over the same pending transfers at the same time."""
    paid(4)
    clock = Clock(PAID_AT)
    results: dict[int, Any] = {}

    def sender(fence: int) -> None:
        try:
            results[fence] = transfers_send_due(
                fence=fence, job_run_id=None, read_clock=clock, concurrency=4, batch_size=3
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sender, args=(fence,)) for fence in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    # Whatever the older fence did not record, the newer one (or a later pass) sends.
    clock.advance(hours=1)
    transfers_send_due(fence=2, job_run_id=None, read_clock=clock, concurrency=4, batch_size=10)
    assert sandbox.state()["transfers"] == 8
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_a_paused_sender_whose_request_is_in_flight_pays_once(sandbox, paid) -> None:
    """A's request is slow (in flight at the provider); its lease runs out, B (newer fence)
    sends the same key: 409 while A's request holds it. A's answer comes, but its fence is
    stale: nothing recorded. B's next attempt gets the provider's replay."""
    paid(1)
    transfer = Transfer.objects.order_by("id").first()
    assert transfer is not None
    sandbox.arm_fault("slow", count=1, methods=("POST",), delay_ms=4000)
    outcome: list[SendResult] = []
    settings_timeout = 10.0  # A waits for its slow answer

    def paused_sender() -> None:
        try:
            with_timeout = stripe.StripeClient(
                "sk_test_tiffin",
                base_addresses={"api": sandbox.url},
                max_network_retries=0,
                http_client=stripe.RequestsClient(timeout=settings_timeout),
            )
            outcome.append(
                transfer_send(
                    transfer_id=transfer.id, fence=1, job_run_id=None, client=with_timeout, read_clock=Clock(PAID_AT)
                )
            )
        finally:
            connections.close_all()

    a = threading.Thread(target=paused_sender)
    a.start()
    wait_for(lambda: sandbox.state()["in_flight"] == 1)
    b_clock = Clock(due_again(transfer))
    assert send_one(transfer, b_clock, fence=2) == SendResult.RETRYING  # 409: the key is in flight
    transfer.refresh_from_db()
    assert "409" in transfer.last_error
    a.join(timeout=60)
    assert outcome == [SendResult.STALE]
    assert sandbox.state()["transfers"] == 1
    b_clock.at = due_again(transfer)
    assert send_one(transfer, b_clock, fence=2) == SendResult.SENT
    transfers_send_due(fence=2, job_run_id=None, read_clock=b_clock, concurrency=2, batch_size=10)
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_an_amount_changed_between_attempts_is_refused_stopped_alerted_and_never_resent(sandbox, paid) -> None:
    transfer, clock = answer_lost(sandbox, paid)
    Transfer.objects.filter(id=transfer.id).update(amount_minor=transfer.amount_minor + 100)  # the bug
    clock.at = due_again(transfer)
    assert send_one(transfer, clock) == SendResult.STOPPED
    transfer.refresh_from_db()
    assert transfer.status == TransferStatus.STOPPED
    assert "IdempotencyError (400)" in transfer.last_error
    [alert] = RunAlert.objects.filter(job_name=SEND_TRANSFERS_JOB)
    assert alert.subject == f"transfer:{transfer.idempotency_key}"
    # Never sent again, by any later pass.
    clock.advance(days=3)
    transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10)
    transfer.refresh_from_db()
    assert (transfer.status, transfer.attempts) == (TransferStatus.STOPPED, 2)
    held = provider.transfers_find(client=stripe_client(), transfer_group=transfer.transfer_group)
    assert [item.amount for item in held] == [transfer.amount_minor - 100]  # the first request, once
    # A person restores the amount and retries: the same key, and the provider's replay.
    Transfer.objects.filter(id=transfer.id).update(amount_minor=transfer.amount_minor - 100)
    transfer_retry(transfer_id=transfer.id, now=clock.at)
    assert send_one(transfer, clock) == SendResult.SENT
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_past_the_key_retention_a_transfer_is_looked_up_not_resent(sandbox, paid) -> None:
    transfer, clock = answer_lost(sandbox, paid)
    # A day passes: the provider forgets the key; a blind resend would pay a second time.
    sandbox.advance_clock(RETENTION + 60)
    clock.advance(seconds=RETENTION + 60)
    assert sandbox.state()["idempotency_keys"] == 0
    assert send_one(transfer, clock) == SendResult.SENT
    transfer.refresh_from_db()
    assert transfer.attempts == 2 and transfer.provider_id.startswith("tr_")
    assert sandbox.state()["transfers"] == 1
    transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10)
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_past_the_key_retention_a_transfer_the_provider_never_made_is_sent_once(sandbox, paid) -> None:
    """The lookup finds nothing, no attempt is recent: the key's window starts again and
    the same key is sent, once."""
    paid(1)
    transfer = Transfer.objects.order_by("id").first()
    assert transfer is not None
    clock = Clock(PAID_AT)
    sandbox.arm_fault("500-before-commit", count=1, methods=("POST",))
    assert send_one(transfer, clock) == SendResult.RETRYING
    assert sandbox.state()["transfers"] == 0
    sandbox.advance_clock(RETENTION + 60)
    clock.advance(seconds=RETENTION + 60)
    assert send_one(transfer, clock) == SendResult.RETRYING  # looked up: none; window reset
    transfer.refresh_from_db()
    assert transfer.first_attempt_at is None and "found no transfer" in transfer.last_error
    assert send_one(transfer, clock) == SendResult.SENT
    assert sandbox.state()["transfers"] == 1
    transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10)
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_a_payout_larger_than_one_transfer_can_carry_is_held_alerted_once_and_never_sent(
    sandbox, restaurant_factory, order_factory
) -> None:
    """Stripe takes at most eight digits of minor units (999,999.99 rupees); the sandbox
    refuses more as Stripe does (400 amount_too_large). The sender holds that payout with
    its reason, alerts once, and never sends it again; the rest go."""
    big_week = [(day, "100000.00") for day in (8, 9, 10, 11, 12, 13) for _ in range(2)]  # 12 lakh gross
    [restaurant] = paid_restaurants(
        restaurant_factory,
        order_factory,
        count=1,
        orders=lambda number: [*big_week, (16, "200.05")],
        fields=lambda restaurant: {"provider_account": f"acct_Tiffin{restaurant.id}"},
    )
    big = Transfer.objects.get(amount_minor__gt=99_999_999)
    assert big.amount_minor == 102_000_000  # 10.2 lakh net: one paisa over is enough
    clock = Clock(PAID_AT)
    result = transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10)
    assert result.counts == {"sent": 1, "held": 1}
    big.refresh_from_db()
    assert (big.status, big.next_attempt_at, big.attempts) == (TransferStatus.HELD, None, 1)
    assert "more than one transfer can carry" in big.last_error
    assert "InvalidRequestError (400)" in big.last_error and "999,999.99" in big.last_error
    [alert] = RunAlert.objects.filter(job_name=SEND_TRANSFERS_JOB)
    assert alert.subject == f"transfer:{big.idempotency_key}" and "transfer held" in alert.detail
    # A problem of check_runs at once (the alert's key: not alerted again) until a person acts.
    [problem] = transfers_not_sent(CheckWindow.ending(clock.at))
    assert problem.subject == alert.subject and problem.detail.startswith("transfer held:")
    # Never sent again, by any pass, nor retried by hand as if a retry could fix it.
    clock.advance(days=3)
    assert transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10).counts == {}
    with pytest.raises(TransferError, match="is held, not stopped"):
        transfer_retry(transfer_id=big.id, now=clock.at)
    big.refresh_from_db()
    assert (big.status, big.attempts) == (TransferStatus.HELD, 1)
    assert [item.amount for item in provider.transfers_all(client=stripe_client())] == [
        to_minor_units(Payout.objects.get(restaurant=restaurant, net__gt=0, net__lt=1000).net, "inr")
    ]
    # Reconciliation names the paid week without its transfer.
    found = transfers_reconcile(client=stripe_client(), now=clock.at, created_since=None, grace=timedelta(days=1))
    assert [(m.kind, m.transfer_group) for m in found.mismatches] == [("unsent", big.transfer_group)]
    assert found.matched == 1


# --- Reconciliation -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_send_the_ledger_forgot_past_the_key_retention_is_found_not_paid_again(sandbox, paid) -> None:
    """What the catch-up after an asynchronous failover meets (tests/scenarios/
    test_failover_transfers.py): the provider paid the week, the ledger's row is new and
    pending with the same key, and the provider has forgotten the key. The first attempt
    looks the group up; a lookup that cannot answer counts as no attempt, so the next one
    looks again instead of sending blind."""
    paid(1)
    transfer = Transfer.objects.order_by("period_start").first()
    assert transfer is not None
    clock = Clock(PAID_AT)
    assert send_one(transfer, clock) == SendResult.SENT
    transfer.refresh_from_db()
    paid_as = transfer.provider_id
    # The failover: the row comes back as the catch-up writes it, never attempted.
    Transfer.objects.filter(id=transfer.id).update(
        status=TransferStatus.PENDING, provider_id="", sent_at=None, attempts=0, first_attempt_at=None,
        last_attempt_at=None, next_attempt_at=PAID_AT, last_error="",
    )  # fmt: skip
    sandbox.advance_clock(RETENTION + 60)
    assert sandbox.state()["idempotency_keys"] == 0
    sandbox.arm_fault("500-before-commit", count=1, methods=("GET",))
    assert send_one(transfer, clock) == SendResult.RETRYING
    transfer.refresh_from_db()
    assert transfer.first_attempt_at is None and "lookup" in transfer.last_error
    clock.advance(minutes=5)
    assert send_one(transfer, clock) == SendResult.SENT
    transfer.refresh_from_db()
    assert transfer.provider_id == paid_as and transfer.attempts == 2
    assert sandbox.state()["transfers"] == 1
    transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=2, batch_size=10)
    assert_provider_matches_ledger()


@pytest.mark.django_db(transaction=True)
def test_the_daily_reconciliation_names_every_disagreement_as_a_problem(sandbox, paid, settings) -> None:
    reconcile_every_disagreement(paid, settings)


def reconcile_every_disagreement(paid: Any, settings: Any) -> JobRun:
    """Two restaurants' four transfers sent, then each kind of disagreement planted (but
    'unsent'), and the reconcile-transfers run of 28 March 04:00 UTC; its problems are
    checked. Returns the run."""
    # Every provider transfer: the sandbox's clock is today's, the ledger's is in 2027.
    settings.TRANSFERS_RECONCILE_WINDOW_DAYS = 0
    paid(2)
    clock = Clock(PAID_AT)
    transfers_send_due(fence=1, job_run_id=None, read_clock=clock, concurrency=4, batch_size=10)
    sent = list(Transfer.objects.order_by("restaurant_id", "period_start"))
    client = stripe_client()
    # Money that left outside the outbox: a second transfer of a paid week (no key), and
    # one the ledger never asked for.
    doubled = sent[0]
    client.v1.transfers.create(
        {
            "amount": doubled.amount_minor,
            "currency": "inr",
            "destination": doubled.destination,
            "transfer_group": doubled.transfer_group,
        }
    )
    client.v1.transfers.create({"amount": 500, "currency": "inr", "destination": "acct_Stranger1"})
    # A paid week that never left: stopped before it was sent.
    Transfer.objects.filter(id=sent[3].id).update(status=TransferStatus.STOPPED, provider_id="", sent_at=None)
    transfer = sent[3]
    # The ledger's record disagrees with the provider's: another id, another amount.
    Transfer.objects.filter(id=sent[1].id).update(provider_id="tr_NeverMade")
    Transfer.objects.filter(id=sent[2].id).update(amount_minor=sent[2].amount_minor + 1)
    checked_at = datetime(2027, 3, 28, 4, 0, tzinfo=UTC)
    with time_machine.travel(checked_at + timedelta(minutes=1), tick=False):
        run = run_execute_here(
            job_name=RECONCILE_TRANSFERS_JOB, scheduled_for=checked_at, now=checked_at, worker="test"
        )
    assert run is not None
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    problems = transfers_reconciled(CheckWindow.ending(checked_at))
    found = sorted((p.subject.rsplit(":", 1)[-1], p.subject.split(":")[1]) for p in problems)
    assert found == sorted(
        [
            ("double", doubled.transfer_group),
            ("missing", sent[1].transfer_group),
            ("different", sent[2].transfer_group),
            ("not_recorded", transfer.transfer_group),
            ("unknown", ""),
        ]
    ), found
    assert isinstance(run.result, dict) and run.result["mismatches"] == 5
    # Of the four transfers the outbox sent, one is recorded as the provider holds it.
    counts = {"matched": 0, "double": 1, "unknown": 1, "different": 1, "not_recorded": 1, "missing": 1, "unsent": 0}
    assert run.result["counts"] == counts
    return run


@pytest.mark.django_db(transaction=True)
def test_the_reconciliation_is_on_metrics_and_the_transfers_admin(
    sandbox, paid, settings, client, admin_client, admin_pages
) -> None:
    settings.METRICS_ENABLED, settings.METRICS_BEARER_TOKEN, settings.METRICS_MULTIPROC_DIR = True, "", ""
    assert "tiffin_transfers_reconciliation" not in scrape(client)  # before any reconciliation
    page = admin_client.get(reverse("admin:transfers_transfer_changelist")).content.decode()
    assert "No reconciliation has compared the provider's transfers with the ledger yet." in page
    run = reconcile_every_disagreement(paid, settings)
    Transfer.objects.filter(status=TransferStatus.SENT).update(status=TransferStatus.HELD, provider_id="")  # counted
    samples = scrape(client)
    assert {labels[0][1]: value for labels, value in samples["tiffin_transfers_reconciliation"].items()} == {
        "matched": 0.0,
        "double": 1.0,
        "unknown": 1.0,
        "different": 1.0,
        "not_recorded": 1.0,
        "missing": 1.0,
        "unsent": 0.0,
    }
    checked = datetime(2027, 3, 28, 4, 1, tzinfo=UTC).timestamp()  # the run's clock
    assert samples["tiffin_transfers_reconciled_timestamp_seconds"] == {(): checked}
    unsent = {labels[0][1]: value for labels, value in samples["tiffin_transfers_unsent"].items()}
    assert unsent == {"waiting_account": 0.0, "pending": 0.0, "stopped": 1.0, "held": 3.0}
    page = " ".join(admin_client.get(reverse("admin:transfers_transfer_changelist")).content.decode().split())
    assert f'href="{reverse("admin:scheduling_jobrun_change", args=[run.id])}"' in page
    assert "<strong>0</strong> transfers matched; 1 missing at the provider, 1 unknown to the ledger," in page
    assert "Each mismatch is an open problem of check_runs." in page
