"""The usual ways of calling a payment provider from a job, against Tiffin's transfer
outbox, through the same faults: ``manage.py compare_keys`` (``make compare-keys``).

Every strategy pays the same payouts (the transfer rows the payout pass wrote: one per
restaurant-week with a positive net) to a real provider sandbox process, from a real
database, and runs under a fence as Tiffin teaches: each run gets a new token
(``scheduling.sql.next_fence``) and records "paid" only through ``fence_check``. What
differs is the one thing this table is about, the provider call's idempotency key:

1. ``no-key`` (WRONG): a plain HTTP POST with no ``Idempotency-Key``; a timeout or a 5xx
   is retried. (The ``stripe`` library adds a random key to every POST by itself, so the
   plain version goes around it, as code calling a provider with ``requests`` does.)
2. ``uuid4`` (WRONG): the ``stripe`` library with ``idempotency_key=str(uuid4())``, a
   fresh key per attempt: what most code does.
3. ``fence`` (WRONG): the run's fence token as the key. A retry inside the run replays;
   the next run, a replacement worker, has another fence, so another key.
4. ``tiffin``: the product's transfer outbox sender, ``transfers_send_due``, called as the
   ``send-transfers`` job calls it (key ``payout-{restaurant}-{period_start}``).

Strategies 1 to 3 are the plain job a team would write: read the payouts not yet paid,
call the provider for each (up to ``ATTEMPTS_PER_RUN`` tries on an error), record each
answer under the run's fence. A payout still unpaid is left for the job's next run.

The faults (``FAULTS``), each in a fresh sandbox over the same rows reset to unpaid:

- ``commit-then-timeout``: the provider commits the first transfer and its answer never
  comes (the client times out);
- ``commit-then-500``: the provider commits the first transfer and answers 500;
- ``died-after-answer``: the worker dies right after the provider's first answer reaches
  it, before its local commit (an exception no code catches, raised by the HTTP session's
  response hook: the same for every strategy); the job's next run retries;
- ``second-worker``: while the first worker's request is in flight (slow answers), a
  second worker with a newer fence sends the same payouts: the replacement of a worker
  paused past its lease (its clock is later than the first's lease).

After each fault the job runs again (a new fence, a later clock) until no payout is
unpaid in the ledger, at most ``RETRY_RUNS`` times. Then the provider is counted through
its API as reconciliation counts it (``transfers.provider.transfers_all``): transfers
per restaurant-week, weeks paid twice or more (doubled), weeks never paid (missing).
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import requests
import stripe
from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings

from scheduling.fencing import StaleFenceError, fence_check
from scheduling.sql import next_fence
from simulation.provider_process import RunningSandbox, running_sandbox
from support.processes import wait_for
from transfers import provider
from transfers.models import Transfer, TransferStatus
from transfers.services import transfers_send_due

STRATEGIES = ("no-key", "uuid4", "fence", "tiffin")
FAULTS = ("commit-then-timeout", "commit-then-500", "died-after-answer", "second-worker")

# The wrong ways' own "paid" write is fenced, as Tiffin teaches: the fence does not stop
# money leaving twice, only the local record of it.
PAID_FENCE_RESOURCE = "key-strategies:paid"
# Tries of one payout inside one run of the plain job (strategies 1-3).
ATTEMPTS_PER_RUN = 3
# Runs of the job after a fault, until the ledger has no unpaid payout.
RETRY_RUNS = 5
# The gap between runs on the simulated clock: past any lease and backoff of the sender
# (TRANSFERS_RETRY_MAX_SECONDS is an hour), well within the provider's key retention.
RUN_GAP = timedelta(hours=2)
# The provider client's timeout; the held answer of commit-then-timeout outlasts it.
CLIENT_TIMEOUT_SECONDS = 3.0
HELD_ANSWER_MS = 6_000
# second-worker: how long each slowed request takes, and the count the slow fault is armed
# with (the count going down is how the second worker knows a request is in flight).
SLOW_MS = 1_000
SLOW_COUNT = 10_000
# Tiffin's sender: requests at a time, answers per heartbeat.
CONCURRENCY = 4
BATCH_SIZE = 50


class WorkerDied(BaseException):
    """The worker's death right after an answer arrived (BaseException: no ``except
    Exception`` in the code under test stops it, as none stops a SIGKILL)."""


@dataclass(frozen=True)
class Run:
    """One run of the job: its fence token, its clock (simulated time from ``start``,
    moving with real time) and its worker's HTTP session."""

    fence: int
    start: datetime
    session: requests.Session
    began: float = field(default_factory=time.monotonic)

    def now(self) -> datetime:
        return self.start + timedelta(seconds=time.monotonic() - self.began)


def new_run(at: datetime, *, die_after_answer: bool = False) -> Run:
    return Run(fence=next_fence(), start=at, session=worker_session(die_after_answer=die_after_answer))


def worker_session(*, die_after_answer: bool) -> requests.Session:
    """The worker's HTTP session. With ``die_after_answer``, the first successful POST's
    answer kills the worker (``WorkerDied``) as it arrives: the provider committed, the
    worker never records it."""
    session = requests.Session()
    if die_after_answer:
        armed = threading.Event()
        armed.set()

        def die(response: requests.Response, *args: Any, **kwargs: Any) -> None:
            if response.request.method == "POST" and response.status_code == 200 and armed.is_set():
                armed.clear()
                raise WorkerDied(f"died after the provider's answer to {response.request.url}")

        session.hooks["response"].append(die)
    return session


def stripe_client(run: Run) -> stripe.StripeClient:
    """``transfers.provider.provider_client``'s client, on the run's HTTP session."""
    return stripe.StripeClient(
        settings.PAYMENT_PROVIDER_KEY,
        base_addresses={"api": settings.PAYMENT_PROVIDER_URL},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS, session=run.session),
    )


# --- The wrong ways: the plain job, with three choices of key -----------------------------


def record_paid(run: Run, transfer: Transfer, provider_id: str) -> None:
    """The plain job's local write, fenced: the payout is paid, with the provider's id."""
    with transaction.atomic():
        fence_check(PAID_FENCE_RESOURCE, run.fence, now=run.now())
        Transfer.objects.filter(id=transfer.id, status=TransferStatus.PENDING).update(
            status=TransferStatus.SENT, provider_id=provider_id, sent_at=run.now()
        )


def no_key_run(run: Run) -> None:
    """WRONG: POST /v1/transfers with no Idempotency-Key; retry a timeout or a 5xx."""
    for transfer in Transfer.objects.filter(status=TransferStatus.PENDING).order_by("id"):
        for _ in range(ATTEMPTS_PER_RUN):
            try:
                answer = run.session.post(
                    f"{settings.PAYMENT_PROVIDER_URL}/v1/transfers",
                    data=form_fields(transfer.request_params()),
                    headers={"Authorization": f"Bearer {settings.PAYMENT_PROVIDER_KEY}"},
                    timeout=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS,
                )
            except requests.RequestException:
                continue  # no answer: try again
            if answer.status_code >= 500:
                continue  # the provider failed: try again
            if answer.status_code == 200:
                record_paid(run, transfer, answer.json()["id"])
            break


def form_fields(params: dict[str, Any]) -> dict[str, str]:
    """Stripe's form encoding of the request: ``metadata[name]=value``."""
    fields = {name: str(value) for name, value in params.items() if name != "metadata"}
    fields.update({f"metadata[{name}]": value for name, value in params["metadata"].items()})
    return fields


def uuid4_run(run: Run) -> None:
    """WRONG: a fresh uuid4 key for every attempt."""
    plain_stripe_run(run, key=lambda transfer: str(uuid.uuid4()))


def fence_key_run(run: Run) -> None:
    """WRONG: the run's fence token as the key (the same for every try in this run only)."""
    plain_stripe_run(run, key=lambda transfer: f"transfer-{transfer.id}-fence-{run.fence}")


def plain_stripe_run(run: Run, *, key: Callable[[Transfer], str]) -> None:
    client = stripe_client(run)
    for transfer in Transfer.objects.filter(status=TransferStatus.PENDING).order_by("id"):
        for _ in range(ATTEMPTS_PER_RUN):
            try:
                created = client.v1.transfers.create(
                    transfer.request_params(),  # type: ignore[arg-type]
                    {"idempotency_key": key(transfer)},
                )
            except (stripe.APIConnectionError, stripe.APIError):
                continue  # a timeout or a 5xx: try again
            except stripe.StripeError:
                break  # refused: the next run tries again
            record_paid(run, transfer, created.id)
            break


# --- Tiffin's: the product's sender -------------------------------------------------------


def tiffin_run(run: Run) -> None:
    """The ``send-transfers`` job's call: every due transfer, under the run's fence."""
    transfers_send_due(
        fence=run.fence,
        job_run_id=None,
        read_clock=run.now,
        concurrency=CONCURRENCY,
        batch_size=BATCH_SIZE,
        client=stripe_client(run),
    )


RUNS: dict[str, Callable[[Run], None]] = {
    "no-key": no_key_run,
    "uuid4": uuid4_run,
    "fence": fence_key_run,
    "tiffin": tiffin_run,
}


# --- The table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One strategy through one fault, counted at the provider."""

    strategy: str
    fault: str
    weeks: int  # restaurant-weeks to pay
    transfers: int  # transfers the provider holds for them
    doubled: int  # weeks with two transfers or more
    missing: int  # weeks with none
    unpaid_in_ledger: int  # transfer rows the ledger still shows unpaid
    events: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return self.doubled == 0 and self.missing == 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def compare_keys(
    *, strategies: tuple[str, ...], faults: tuple[str, ...], start: datetime, say: Callable[[str], None]
) -> list[Cell]:
    """Every strategy through every fault; the transfer rows must exist (the payout pass
    wrote them) and are reset to unpaid before each cell."""
    cells = []
    with tempfile.TemporaryDirectory(prefix="tiffin-keys-") as tmp:
        for number, (strategy, fault) in enumerate((s, f) for s in strategies for f in faults):
            state = Path(tmp) / f"provider-{number}.sqlite3"
            log = Path(tmp) / "provider.log"
            with running_sandbox(state_path=state, log_path=log) as sandbox, provider_settings(sandbox):
                cell = run_cell(strategy, fault, sandbox=sandbox, start=start)
            say(f"{strategy:7} {fault:20} {cell.transfers} transfers for {cell.weeks} weeks: "
                f"{cell.doubled} doubled, {cell.missing} missing")  # fmt: skip
            cells.append(cell)
    return cells


@contextmanager
def provider_settings(sandbox: RunningSandbox) -> Iterator[None]:
    with override_settings(
        PAYMENT_PROVIDER_URL=sandbox.url,
        PAYMENT_PROVIDER_KEY="sk_test_compare_keys",
        PAYMENT_PROVIDER_TIMEOUT_SECONDS=CLIENT_TIMEOUT_SECONDS,
    ):
        yield


def reset_transfers(*, now: datetime) -> None:
    """Every transfer row unpaid and due, as the payout pass wrote it."""
    Transfer.objects.update(
        status=TransferStatus.PENDING,
        provider_id="",
        attempts=0,
        first_attempt_at=None,
        last_attempt_at=None,
        next_attempt_at=now,
        last_error="",
        sent_at=None,
    )


def run_cell(strategy: str, fault: str, *, sandbox: RunningSandbox, start: datetime) -> Cell:
    send = RUNS[strategy]
    reset_transfers(now=start)
    events: list[str] = []
    at = start
    if fault in ("commit-then-timeout", "commit-then-500"):
        sandbox.arm_fault(fault, count=1, methods=("POST",), delay_ms=HELD_ANSWER_MS)
        attempt(send, new_run(at), events)
    elif fault == "died-after-answer":
        attempt(send, new_run(at, die_after_answer=True), events)
    elif fault == "second-worker":
        second_worker(send, sandbox=sandbox, at=at, events=events)
    else:
        raise ValueError(f"unknown fault {fault!r}")
    sandbox.clear_fault()
    for _ in range(RETRY_RUNS):
        if not Transfer.objects.exclude(status=TransferStatus.SENT).exists():
            break
        at += RUN_GAP
        attempt(send, new_run(at), events)
    return count_at_provider(strategy, fault, events)


def attempt(send: Callable[[Run], None], run: Run, events: list[str]) -> None:
    """One run of the job; its death or its fence's refusal ends it, as it ends a run."""
    try:
        send(run)
    except WorkerDied as death:
        events.append(f"fence {run.fence}: {death}")
    except StaleFenceError as error:
        events.append(f"fence {run.fence}: {error}")
    finally:
        run.session.close()


def second_worker(send: Callable[[Run], None], *, sandbox: RunningSandbox, at: datetime, events: list[str]) -> None:
    """The first worker sends with slow answers; once its first request is at the
    provider, a second worker (a newer fence, a clock past the first's lease) sends too."""
    sandbox.arm_fault("slow", count=SLOW_COUNT, methods=("POST",), delay_ms=SLOW_MS)
    first = new_run(at)
    threads = [threading.Thread(target=in_thread, args=(send, first, events), name="first-worker")]
    threads[0].start()
    try:
        wait_for(
            lambda: (sandbox.state().get("fault") or {}).get("count", SLOW_COUNT) < SLOW_COUNT,
            timeout=60,
            interval=0.02,
            what="the first worker's request at the provider",
        )
        second = new_run(at + RUN_GAP)
        threads.append(threading.Thread(target=in_thread, args=(send, second, events), name="second-worker"))
        threads[1].start()
    finally:
        for thread in threads:
            thread.join()


def in_thread(send: Callable[[Run], None], run: Run, events: list[str]) -> None:
    try:
        attempt(send, run, events)
    finally:
        connection.close()  # this thread's database connection


def count_at_provider(strategy: str, fault: str, events: list[str]) -> Cell:
    """The provider's transfers per restaurant-week, read through its API."""
    held = provider.transfers_all(client=provider.provider_client())
    per_week = Counter(item.transfer_group for item in held)
    weeks = set(Transfer.objects.values_list("transfer_group", flat=True))
    return Cell(
        strategy=strategy,
        fault=fault,
        weeks=len(weeks),
        transfers=len(held),
        doubled=sum(1 for week in weeks if per_week[week] > 1),
        missing=sum(1 for week in weeks if per_week[week] == 0),
        unpaid_in_ledger=Transfer.objects.exclude(status=TransferStatus.SENT).count(),
        events=tuple(events),
    )


LABELS = {
    "no-key": "no key (wrong)",
    "uuid4": "uuid4 per attempt (wrong)",
    "fence": "fence as key (wrong)",
    "tiffin": "Tiffin (business identity)",
}


def key_table(cells: list[Cell]) -> list[str]:
    """One line per strategy, one column per fault: doubled / missing weeks."""
    faults = list(dict.fromkeys(cell.fault for cell in cells))
    strategies = list(dict.fromkeys(cell.strategy for cell in cells))
    by = {(cell.strategy, cell.fault): cell for cell in cells}
    weeks = cells[0].weeks if cells else 0
    width = max(len(fault) for fault in faults) if faults else 0
    lines = [
        f"Each cell: restaurant-weeks paid twice or more / never paid, of {weeks}, counted at the provider.",
        "",
        f"{'strategy':28}" + "".join(f"{fault:>{width + 2}}" for fault in faults),
    ]
    for strategy in strategies:
        row = "".join(
            f"{f'{by[strategy, fault].doubled} / {by[strategy, fault].missing}':>{width + 2}}" for fault in faults
        )
        lines.append(f"{LABELS[strategy]:28}{row}")
    return lines


def tiffin_clean(cells: list[Cell]) -> bool:
    return all(cell.clean for cell in cells if cell.strategy == "tiffin")
