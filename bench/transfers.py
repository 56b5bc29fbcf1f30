"""Benchmark 8: sending the transfer outbox to a provider with 50 ms of latency.

N payouts (default 10,000: one per restaurant, for the week that has just ended, as a
weekly payout pass writes them) and their pending transfers are written by the payout
pass's own function (``transfers_create_for_payouts``) on a fresh database. On time, so
a first attempt sends its key with no lookup first (a week that ended longer ago than the
provider's key retention is looked up before its first send: docs/transfers.md, two
requests where the bare loop makes one). The provider is ``provider_sandbox`` started as a real process with
``--latency-ms 50``, a fresh state file for each side, stopped by process group however
the benchmark ends.

- project: ``manage.py run_job send-transfers --sync`` (the job as a worker runs it: its
  claim, fence, heartbeats, ``TRANSFERS_CONCURRENCY`` threads), timed by the run's own
  ``started_at``/``finished_at`` (the process's start-up is reported beside it); run again
  until nothing is pending.
- reference: a bare loop of the same HTTP calls: the same ``stripe`` library call
  (``client.v1.transfers.create`` with the same body and ``Idempotency-Key``) through the
  same client settings, on a thread pool of the same size, each thread taking the next
  request as soon as its last one answered. No database at all.

Goal: the project's throughput at least 0.9 x the reference's; and, checked at the end
against each sandbox (``GET /v1/transfers``, every page), exactly one transfer per payout
with the ledger's amount and destination, and every ledger row sent with that id.

    python -m bench.transfers [--count 10000] [--concurrency 8] [--latency-ms 50]
    python -m bench.transfers --quick       # 1,000 transfers, while developing
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.common import PYTHON, ROOT, Report, Row, child_env, database_create, django_setup, official_run
from simulation.provider_process import RunningSandbox, running_sandbox
from support.processes import guarded_run

NAME = "transfers"
GOAL = 0.9
COUNT_STEP = 100


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="transfers to send (a multiple of 100)")
    parser.add_argument("--quick", action="store_true", help="1,000 transfers (development)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight, both sides (8)")
    parser.add_argument("--latency-ms", type=int, default=50, help="the sandbox's latency per request (50)")
    args = parser.parse_args(argv)
    if args.quick:
        args.count = 1000
    if args.count < COUNT_STEP or args.count % COUNT_STEP:
        parser.error(f"--count must be a positive multiple of {COUNT_STEP}, not {args.count}")
    if args.concurrency < 1 or args.latency_ms < 0:
        parser.error("--concurrency must be >= 1 and --latency-ms >= 0")
    return args


def outbox_write(count: int) -> None:
    """``count`` payouts with a positive net and their pending transfers, written as the
    weekly payout pass writes them (one call of ``transfers_create_for_payouts``): one per
    restaurant, for the week that ended within the hour."""
    from orders.models import Restaurant
    from payouts.models import Payout
    from transfers.services import transfers_create_for_payouts

    written_at = datetime.now(UTC).replace(microsecond=0)
    week_start = (written_at - timedelta(weeks=1)).replace(minute=0, second=0)
    restaurants = Restaurant.objects.bulk_create(
        (
            Restaurant(
                name=f"bench {i}",
                timezone="UTC",
                commission_rate=Decimal("0.1500"),
                onboarded_at=week_start - timedelta(weeks=1),
                provider_account=f"acct_bench{i:05d}",
            )
            for i in range(count)
        ),
        batch_size=2000,
    )
    payouts = [
        Payout(
            restaurant=restaurant,
            period_start=week_start,
            period_end=week_start + timedelta(weeks=1),
            week_start_local=week_start.date(),
            gross=Decimal(1000 + i % 100),
            commission=Decimal("150.00"),
            net=Decimal(1000 + i % 100) - Decimal("150.00"),
            order_count=10,
            commission_rate=Decimal("0.1500"),
            tzdata_version="bench",
            created_at=written_at,
        )
        for i, restaurant in enumerate(restaurants)
    ]
    Payout.objects.bulk_create(payouts, batch_size=2000)
    written = transfers_create_for_payouts(restaurant_ids=[r.id for r in restaurants], written_at=written_at)
    if written != count:
        raise SystemExit(f"wrote {written} transfers, expected {count}")


def project_send(url: str, sandbox: RunningSandbox, *, concurrency: int) -> dict[str, Any]:
    """``run_job send-transfers --sync`` until nothing is pending; the runs' summed time
    (started_at to finished_at), the processes' wall time and the runs made."""
    from django.db.models import F, Sum

    from scheduling.models import JobRun
    from transfers.models import SEND_TRANSFERS_JOB, Transfer, TransferStatus

    env = child_env(
        url,
        PAYMENT_PROVIDER_URL=sandbox.url,
        TRANSFERS_CONCURRENCY=str(concurrency),
    )
    wall = cpu = 0.0
    runs = 0
    first_tick = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    while Transfer.objects.filter(status=TransferStatus.PENDING).exists():
        if runs == 5:
            raise SystemExit("the sender left transfers pending after 5 runs")
        # Each run claims its own minute's tick; several runs in one minute need other ticks.
        tick = (first_tick + timedelta(minutes=runs)).isoformat()
        started = time.perf_counter()
        cpu_before = _children_cpu()
        code = guarded_run(
            [PYTHON, "manage.py", "run_job", SEND_TRANSFERS_JOB, "--sync", "--scheduled-for", tick],
            cwd=ROOT,
            env=env,
        )
        wall += time.perf_counter() - started
        cpu += _children_cpu() - cpu_before
        runs += 1
        if code:
            raise SystemExit(f"run_job {SEND_TRANSFERS_JOB} --sync exited with {code}")
    spent = JobRun.objects.filter(job_name=SEND_TRANSFERS_JOB).aggregate(
        seconds=Sum(F("finished_at") - F("started_at"))
    )["seconds"]
    return {"seconds": spent.total_seconds(), "wall": wall, "runs": runs, "cpu": cpu}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reference_send(
    sandbox: RunningSandbox, requests: list[tuple[dict[str, Any], str]], *, concurrency: int
) -> tuple[float, float]:
    """The bare loop: ``client.v1.transfers.create(params, {"idempotency_key": key})`` for
    each request on ``concurrency`` threads; its wall and CPU time. Every answer must be a transfer."""
    import stripe
    from django.conf import settings

    client = stripe.StripeClient(
        settings.PAYMENT_PROVIDER_KEY,
        base_addresses={"api": sandbox.url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS),
    )
    lock = threading.Lock()
    created: list[str] = []

    def send(request: tuple[dict[str, Any], str]) -> None:
        params, key = request
        transfer = client.v1.transfers.create(params, {"idempotency_key": key})  # type: ignore[arg-type]
        with lock:
            created.append(transfer.id)

    started = time.perf_counter()
    cpu_before = time.process_time()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for _ in pool.map(send, requests):
            pass
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    if len(created) != len(requests):
        raise SystemExit(f"the reference created {len(created)} of {len(requests)} transfers")
    return elapsed, cpu


def provider_check(sandbox: RunningSandbox, *, ledger: dict[str, tuple[int, str]], ids: dict[str, str]) -> int:
    """The problems found comparing what the sandbox holds with the ledger: a group with
    other than one transfer, a different amount or destination, a transfer the ledger does
    not know, or (when ``ids`` is given) a ledger row recording another provider id."""
    import stripe
    from django.conf import settings

    from transfers import provider

    client = stripe.StripeClient(settings.PAYMENT_PROVIDER_KEY, base_addresses={"api": sandbox.url})
    held = provider.transfers_all(client=client)
    per_group = Counter(t.transfer_group for t in held)
    problems = sum(1 for group in ledger if per_group[group] != 1)
    problems += sum(1 for t in held if t.transfer_group not in ledger)
    problems += sum(
        1 for t in held if t.transfer_group in ledger and (t.amount, t.destination) != ledger[t.transfer_group]
    )
    if ids:
        problems += sum(1 for t in held if t.transfer_group in ids and ids[t.transfer_group] != t.id)
    return problems


def main() -> int:
    args = parse()
    url = database_create(NAME)
    django_setup(url)
    from transfers.models import Transfer, TransferStatus

    outbox_write(args.count)
    rows = list(Transfer.objects.order_by("id"))
    ledger = {t.transfer_group: (t.amount_minor, t.destination) for t in rows}
    requests = [(t.request_params(), t.idempotency_key) for t in rows]
    with tempfile.TemporaryDirectory(prefix="bench-transfers-") as tmp:
        logs = Path(tmp)
        with running_sandbox(
            state_path=logs / "reference.sqlite3", latency_ms=args.latency_ms, log_path=logs / "reference.log"
        ) as sandbox:
            reference_seconds, reference_cpu = reference_send(sandbox, requests, concurrency=args.concurrency)
            reference_problems = provider_check(sandbox, ledger=ledger, ids={})
        with running_sandbox(
            state_path=logs / "project.sqlite3", latency_ms=args.latency_ms, log_path=logs / "project.log"
        ) as sandbox:
            project = project_send(url, sandbox, concurrency=args.concurrency)
            sent = dict(
                Transfer.objects.filter(status=TransferStatus.SENT).values_list("transfer_group", "provider_id")
            )
            project_problems = provider_check(sandbox, ledger=ledger, ids=sent)
    unsent = args.count - len(sent)
    project["reference_cpu"] = reference_cpu
    return report(args, project, reference_seconds, project_problems + unsent, reference_problems).finish()


def report(
    args: argparse.Namespace, project: dict[str, Any], reference_seconds: float, problems: int, reference_problems: int
) -> Report:
    rep = Report(
        name=NAME,
        title=f"8. transfers: {args.count:,} to the sandbox with {args.latency_ms} ms latency, "
        f"{args.concurrency} in flight",
        command="python -m bench.transfers",
        project="manage.py run_job send-transfers --sync (claim, fence, outbox rows, stripe library)",
        reference=f"bare loop: stripe client.v1.transfers.create with the same keys, {args.concurrency} threads",
        partial=not official_run(NAME, args, parse),
    )
    project_rate = args.count / project["seconds"]
    reference_rate = args.count / reference_seconds
    ratio = project_rate / reference_rate
    rep.add(
        Row("wall time (the job run)", "s", project["seconds"], reference_seconds),
        Row(
            "transfers per second",
            "/s",
            project_rate,
            reference_rate,
            "higher",
            f"<= {1 / GOAL:.2f} x (>= {GOAL} x its rate)",
            ratio >= GOAL,
        ),
        Row("wall time of the run_job processes", "s", project["wall"], None, None),
        Row(
            "CPU per 1,000 transfers (run_job process, start-up included)",
            "s",
            project["cpu"] * 1000 / args.count,
            project["reference_cpu"] * 1000 / args.count,
        ),
        Row("job runs needed", "runs", project["runs"], None, None),
        Row(
            "payouts without exactly one matching transfer",
            "payouts",
            problems,
            reference_problems,
            None,
            "0",
            problems == 0 and reference_problems == 0,
        ),
    )
    rep.note(f"the project sends at {ratio:.2f} x the bare loop's rate (goal: at least {GOAL} x)")
    ideal = args.count * args.latency_ms / 1000 / args.concurrency
    rep.note(
        f"latency alone bounds either side at {ideal:.1f} s ({args.count:,} x {args.latency_ms} ms / "
        f"{args.concurrency})"
    )
    return rep


if __name__ == "__main__":
    raise SystemExit(main())
