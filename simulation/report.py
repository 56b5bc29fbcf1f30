"""What a simulation did, read back from the database, and the invariants it must keep.

The window is the schedules' first registration up to the newest scheduler pass: every
cron tick in it must have been claimed once, and every run claimed or due in it must
have finished (succeeded, or skipped with a reason), unless a retry was still pending
when the window closed. The checks are counts from the database, never the processes'
own word:

- duplicates: claim rows per (job, subject, tick), probe charges per tick, payouts per
  (restaurant, week);
- misses: ticks never claimed, runs dead or stuck (a dead run of a job that has one
  attempt per run, retried by its next tick, is explained once a later tick succeeded);
- payouts checked against orders: amounts, and no finished week left unpaid;
- orders: none both accepted and cancelled, none cancelled before its deadline, none
  left unanswered past its deadline;
- money that left (when the run had a provider): every paid week (a payout with a
  positive net) exactly one transfer of the same amount at the provider, read through the
  provider's API as reconciliation reads it, and no transfer the ledger does not know;
- statements (when the run wrote its mail to a directory): every statement found at
  least once among the messages the mail backend wrote (by its Message-ID); copies are
  counted, not a problem (SMTP promises at least once).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import stripe
from django.conf import settings
from django.db.models import Count, Max, Min, Sum

from orders.models import Order, OrderStatus, Restaurant
from orders.selectors import restaurant_rate_at
from payouts.models import Payout
from payouts.selectors import ledger_problems, payout_paid_as_of
from payouts.weeks import weeks_finished
from scheduling import cron
from scheduling.models import RETRY_STATUSES, JobKind, JobRun, JobRunEvent, RunStatus, Schedule, SchedulerNode, Trigger
from simulation.models import ProbeCharge
from statements.models import Statement, StatementStatus
from tiffin.money import CENT, minor_unit_exponent, to_minor_units
from transfers import provider
from transfers.models import Transfer, TransferStatus, transfer_identity

TRAFFIC_CUSTOMERS = "rush-"  # customer_ref prefix of the orders simulate_orders places
# The reason a dead run of a one-attempt job is explained: a later tick did its work.
DEAD_TAKEN_OVER = "dead, a later tick ran"
# The reason a dead run is explained in a chaos run: an injected fault (a kill or a pause
# of its worker) landed in each of its attempts. The kills aimed at the payout and at the
# sender must take the worker that runs them, whatever else it runs, so they can land in
# a settlement run an earlier fault already hit (seed 3 behind PgBouncer on a loaded
# machine: a pause, the payout kill and the sender kill, one per attempt).
DEAD_BY_FAULTS = "dead, a fault in every attempt"


@dataclass
class JobTicks:
    job_name: str
    expected: int = 0
    succeeded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    never_claimed: int = 0
    retry_pending: int = 0  # a retry was due after the window closed: explained
    broken: list[str] = field(default_factory=list)  # dead, or stuck after the drain


@dataclass
class PayoutCheck:
    checked: int = 0
    as_of: datetime | None = None
    wrong_amounts: list[str] = field(default_factory=list)
    duplicates: int = 0
    unpaid_weeks: int = 0
    # The ledger invariant (payouts.selectors.ledger_problems): contiguity and money.
    ledger: list[str] = field(default_factory=list)


@dataclass
class OrderCheck:
    statuses: dict[str, int] = field(default_factory=dict)
    accepted_and_cancelled: int = 0
    cancelled_early: int = 0
    overdue_unanswered: int = 0


@dataclass
class RestaurantMoney:
    """One restaurant's paid weeks in the ledger beside its transfers at the provider."""

    restaurant_id: int
    name: str
    payouts: int  # payouts with a positive net
    net: Decimal
    transfers: int  # held by the provider for this restaurant
    transferred: Decimal

    @property
    def agree(self) -> bool:
        return (self.payouts, self.net) == (self.transfers, self.transferred)


@dataclass
class TransferCheck:
    """The ledger's paid weeks against the provider's transfers (empty without a provider)."""

    checked: bool = False
    paid_weeks: int = 0
    held: int = 0  # transfers the provider holds
    missing: int = 0  # paid weeks the provider holds no transfer for
    waiting_account: int = 0  # ... of which the restaurant has no provider account (explained)
    doubles: int = 0  # extra transfers of paid weeks held more than once
    wrong_amounts: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # provider transfers of no paid week
    restaurants: list[RestaurantMoney] = field(default_factory=list)


@dataclass
class StatementCheck:
    """Statements against the messages the mail backend wrote (empty without a mail directory)."""

    checked: bool = False
    payouts_without: int = 0  # payouts with no statement row
    statements: int = 0
    delivered: int = 0  # statements found at least once
    copies: int = 0  # messages beyond the first of a statement (at least once allows them)
    waiting_recipient: int = 0  # no address yet: explained
    unsent: list[str] = field(default_factory=list)


@dataclass
class SimulationReport:
    window_start: datetime
    window_end: datetime
    jobs: list[JobTicks]
    delayed: JobTicks
    duplicate_claims: int
    duplicate_charges: int
    charged_ticks: int
    payouts: PayoutCheck
    orders: OrderCheck
    lateness: dict[str, float]
    recovery: dict[str, int]
    transfers: TransferCheck = field(default_factory=TransferCheck)
    statements: StatementCheck = field(default_factory=StatementCheck)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        for row, money in zip(data["transfers"]["restaurants"], self.transfers.restaurants, strict=True):
            row["agree"] = money.agree
        data["ok"] = self.ok
        return data


def simulation_report(
    *,
    extra_problems: list[str],
    clock_skew: float = 0.0,
    provider_url: str | None = None,
    mail_dir: Path | None = None,
    window_end: datetime | None = None,
    struck: Mapping[int, Collection[int | None]] | None = None,
) -> SimulationReport:
    """Read everything back and check the invariants (see the module doc).

    ``provider_url``: the payment provider the run's processes sent transfers to (its
    transfers are read through its API); ``mail_dir``: where their mail backend wrote the
    statements (``EMAIL_FILE_PATH``). Without them those checks are left out.
    ``window_end``: when the simulated window closed (the servers go on after it until
    they settle); by default the schedulers' last pass.

    ``struck``: for each run an injected fault landed in, the fences of its attempts that
    were hit (``ChaosSimulation.struck``): a dead run with a fault in every attempt is
    explained (``DEAD_BY_FAULTS``).

    ``clock_skew`` is how far the schedulers' clocks were spread: a scheduler whose clock
    is fast claims a safety-net tick, or hands out a cancellation run, that much early.
    No cancellation may come before its deadline, whatever the skew: the database's clock
    judges it (``orders.services.orders_cancel_unaccepted``).
    """
    window_start, last_pass = _window()
    window_end = min(window_end, last_pass) if window_end else last_pass
    schedules = Schedule.objects.filter(kind=JobKind.CRON)
    jobs = [_cron_job_ticks(schedule, window_end, struck or {}) for schedule in schedules]
    report = SimulationReport(
        window_start=window_start,
        window_end=window_end,
        jobs=jobs,
        delayed=_delayed_runs(window_end),
        duplicate_claims=_duplicate_claims(),
        duplicate_charges=_duplicate_charges(),
        charged_ticks=ProbeCharge.objects.filter(scheduled_for__lte=window_end)
        .values("job_name", "scheduled_for")
        .distinct()
        .count(),
        payouts=_payouts_check(),
        orders=_orders_check(window_end, clock_skew=timedelta(seconds=clock_skew)),
        lateness=_lateness(window_end),
        recovery=_recovery(window_end),
        transfers=_transfers_check(provider_url, window_end) if provider_url else TransferCheck(),
        statements=_statements_check(mail_dir, window_end) if mail_dir is not None else StatementCheck(),
    )
    report.problems = [*extra_problems, *_problems(report)]
    return report


def _window() -> tuple[datetime, datetime]:
    start = Schedule.objects.aggregate(first=Min("first_seen_at"))["first"]
    end = SchedulerNode.objects.aggregate(last=Max("last_pass_at"))["last"]
    if start is None or end is None:
        raise LookupError("no scheduler ever ran a pass: there is nothing to report")
    return start, end


def _cron_job_ticks(schedule: Schedule, window_end: datetime, struck: Mapping[int, Collection[int | None]]) -> JobTicks:
    ticks = JobTicks(schedule.job_name)
    expected = cron.ticks_between(schedule.cron, schedule.timezone, schedule.first_seen_at, window_end)
    runs = {
        run.scheduled_for: run
        for run in JobRun.objects.filter(
            job_name=schedule.job_name, subject="", trigger=Trigger.CRON, scheduled_for__lte=window_end
        )
    }
    ticks.expected = len(expected)
    ticks.never_claimed = sum(1 for tick in expected if tick not in runs)
    # A job with one attempt per run (send-transfers: each transfer keeps its own retry
    # schedule) is retried by its next tick: a dead run with a later tick that succeeded is
    # explained. The others' dead runs are misses.
    retried_by_next: datetime | None = None
    if schedule.max_attempts == 1:
        succeeded = [tick for tick, run in runs.items() if run.status == RunStatus.SUCCEEDED]
        retried_by_next = max(succeeded, default=None)
    for run in runs.values():
        if run.status == RunStatus.DEAD and retried_by_next is not None and run.scheduled_for < retried_by_next:
            ticks.skipped[DEAD_TAKEN_OVER] = ticks.skipped.get(DEAD_TAKEN_OVER, 0) + 1
            continue
        if run.status == RunStatus.DEAD and len(struck.get(run.id, ())) >= run.attempts:
            ticks.skipped[DEAD_BY_FAULTS] = ticks.skipped.get(DEAD_BY_FAULTS, 0) + 1
            continue
        _classify(ticks, run, window_end)
    return ticks


def _classify(ticks: JobTicks, run: JobRun, window_end: datetime) -> None:
    if run.status == RunStatus.SUCCEEDED:
        ticks.succeeded += 1
    elif run.status in (RunStatus.SKIPPED, RunStatus.SUPERSEDED):
        reason = run.skip_reason or str(run.status)
        ticks.skipped[reason] = ticks.skipped.get(reason, 0) + 1
    elif run.status in RETRY_STATUSES and run.due_at > window_end:
        ticks.retry_pending += 1
    else:
        line = f"{run.job_name} {run.subject} @ {run.scheduled_for:%Y-%m-%d %H:%M}: {run.status}"
        ticks.broken.append(line + (_attempt_ends(run) if run.status == RunStatus.DEAD else ""))


# The events that end an attempt: the run retries after the first two, the last is final.
ATTEMPT_ENDS = ("failed", "abandoned", "dead")


def _attempt_ends(run: JobRun) -> str:
    """How each attempt of a dead run ended, from its events: which fault or which late
    heartbeat spent its attempts, in the report itself (the processes' logs are gone once
    a test's temporary directory is). The event's time is the clock of the process that
    wrote it (an abandonment: the judging scheduler's, skew included); its message's last
    line (an exception's own line after a traceback)."""
    ends = JobRunEvent.objects.filter(run=run, kind__in=ATTEMPT_ENDS).order_by("id")
    told = [
        f"{event.attempt or '?'}. {event.kind} at {event.at:%H:%M:%S}: {_last_line(event.message)}" for event in ends
    ]
    return f" after {run.attempts} attempts ({'; '.join(told)})" if told else ""


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"


def _delayed_runs(window_end: datetime) -> JobTicks:
    """Delayed runs due in the window, classified like cron ticks."""
    ticks = JobTicks("delayed runs")
    delayed = Schedule.objects.filter(kind=JobKind.DELAYED).values("job_name")
    for run in JobRun.objects.filter(job_name__in=delayed, due_at__lte=window_end, trigger=Trigger.DELAYED):
        ticks.expected += 1
        _classify(ticks, run, window_end)
    return ticks


def _duplicate_claims() -> int:
    keys = JobRun.objects.values("job_name", "subject", "scheduled_for").annotate(n=Count("id")).filter(n__gt=1)
    return sum(row["n"] - 1 for row in keys)


def _duplicate_charges() -> int:
    ticks = ProbeCharge.objects.values("job_name", "scheduled_for").annotate(n=Count("id")).filter(n__gt=1)
    return sum(row["n"] - 1 for row in ticks)


def _payouts_check() -> PayoutCheck:
    check = PayoutCheck()
    payouts = list(Payout.objects.select_related("restaurant").order_by("id"))
    check.checked = len(payouts)
    check.wrong_amounts = [line for payout in payouts if (line := payout_mismatch(payout))]
    weeks = Counter((payout.restaurant_id, payout.period_start) for payout in payouts)
    check.duplicates = sum(n - 1 for n in weeks.values())
    latest = payout_paid_as_of()
    if latest is not None:
        check.as_of = latest
        check.unpaid_weeks = len(_weeks_due(latest) - set(weeks))
    check.ledger = [
        f"restaurant {problem.restaurant_id}: {problem.detail}" for problem in ledger_problems(paid_as_of=latest)
    ]
    return check


def payout_mismatch(payout: Payout) -> str:
    """Empty when the payout's amounts are those of its orders (commission rounded half-up)."""
    orders = Order.objects.filter(
        restaurant_id=payout.restaurant_id,
        status=OrderStatus.DELIVERED,
        delivered_at__gte=payout.period_start,
        delivered_at__lt=payout.period_end,
    ).aggregate(gross=Sum("total"), n=Count("id"))
    gross = Decimal(orders["gross"] or 0).quantize(CENT)  # SQLite sums decimals as floats
    rate = restaurant_rate_at(restaurant=payout.restaurant, at=payout.period_start)
    commission = (gross * rate).quantize(CENT, rounding=ROUND_HALF_UP)
    stored = (payout.gross, payout.commission, payout.net, payout.order_count)
    if stored == (gross, commission, gross - commission, orders["n"]):
        return ""
    return f"payout {payout.pk}: stored {stored}, orders say {(gross, commission, gross - commission, orders['n'])}"


def provider_client_for(provider_url: str) -> stripe.StripeClient:
    """A client of the run's provider for reading its transfers (the run's processes have
    the provider in their environment; the command that reports has not)."""
    return stripe.StripeClient(
        settings.PAYMENT_PROVIDER_KEY, base_addresses={"api": provider_url}, max_network_retries=3
    )


def _transfers_check(provider_url: str, window_end: datetime) -> TransferCheck:
    """Every paid week (a payout with a positive net) written in the window against the
    provider's transfers, listed through its API with the official library, as
    reconciliation lists them. A payout written after the window (a tick the servers
    reached while they settled) is not the window's: its transfer, if sent, is neither
    missing nor unknown."""
    later = {
        transfer_identity(restaurant_id=restaurant_id, period_start=period_start)
        for restaurant_id, period_start in Payout.objects.filter(created_at__gt=window_end).values_list(
            "restaurant_id", "period_start"
        )
    }
    client = provider_client_for(provider_url)
    held: dict[str, list[provider.ProviderTransfer]] = defaultdict(list)
    for item in provider.transfers_all(client=client):
        if item.transfer_group not in later:
            held[item.transfer_group].append(item)
    check = TransferCheck(checked=True, held=sum(len(items) for items in held.values()))
    currency = settings.PAYMENT_CURRENCY
    scale = Decimal(10) ** minor_unit_exponent(currency)
    waiting = set(
        Transfer.objects.filter(status=TransferStatus.WAITING_ACCOUNT).values_list("restaurant_id", "period_start")
    )
    names = dict(Restaurant.objects.values_list("id", "name"))
    money: dict[int, RestaurantMoney] = {}

    def of(restaurant_id: int) -> RestaurantMoney:
        name = names.get(restaurant_id, "?")
        return money.setdefault(restaurant_id, RestaurantMoney(restaurant_id, name, 0, Decimal(0), 0, Decimal(0)))

    weeks = set()
    for restaurant_id, period_start, net in Payout.objects.filter(net__gt=0, created_at__lte=window_end).values_list(
        "restaurant_id", "period_start", "net"
    ):
        group = transfer_identity(restaurant_id=restaurant_id, period_start=period_start)
        weeks.add(group)
        check.paid_weeks += 1
        row = of(restaurant_id)
        row.payouts += 1
        row.net += net
        items = held.get(group, [])
        if not items:
            check.missing += 1
            check.waiting_account += (restaurant_id, period_start) in waiting
        check.doubles += max(0, len(items) - 1)
        expected = to_minor_units(net, currency)
        check.wrong_amounts += [
            f"{item.id} ({group}): {item.amount} at the provider, the payout's net is {expected}"
            for item in items
            if item.amount != expected
        ]
    for group, items in held.items():
        for item in items:
            owner = _restaurant_of(item)
            if owner is not None:
                row = of(owner)
                row.transfers += 1
                row.transferred += Decimal(item.amount) / scale
            if group not in weeks:
                check.unknown.append(f"{item.id} ({group or 'no transfer group'})")
    check.restaurants = [money[key] for key in sorted(money)]
    return check


def _restaurant_of(item: provider.ProviderTransfer) -> int | None:
    """The restaurant a provider transfer pays: its metadata, else its group's identity."""
    text = item.metadata.get("restaurant_id") or (item.transfer_group.split("-")[1:2] or [""])[0]
    return int(text) if text.isdigit() else None


# A header line of a message the file-based mail backend wrote (one or more per file).
_MESSAGE_ID = re.compile(r"^Message-ID: (<[^>]+>)\s*$", re.MULTILINE)


def _statements_check(mail_dir: Path, window_end: datetime) -> StatementCheck:
    """Every statement of a payout written in the window found among the messages written
    to ``mail_dir`` (the receiving side of the run's mail backend), by its Message-ID."""
    found = Counter(
        message_id for path in sorted(mail_dir.glob("*")) for message_id in _MESSAGE_ID.findall(path.read_text())
    )
    check = StatementCheck(checked=True)
    check.payouts_without = Payout.objects.filter(statement__isnull=True, created_at__lte=window_end).count()
    window = Statement.objects.filter(payout__created_at__lte=window_end)
    for message_id, status in window.order_by("id").values_list("message_id", "status"):
        check.statements += 1
        copies = found.get(message_id, 0)
        if copies:
            check.delivered += 1
            check.copies += copies - 1
        elif status == StatementStatus.WAITING_RECIPIENT:
            check.waiting_recipient += 1
        else:
            check.unsent.append(f"{message_id} ({status})")
    return check


def _weeks_due(as_of: datetime) -> set[tuple[int, datetime]]:
    delay = timedelta(seconds=settings.PAYOUT_SETTLEMENT_DELAY_SECONDS)
    return {
        (restaurant_id, week.period_start)
        for restaurant_id, zone, onboarded_at, deactivated_at in Restaurant.objects.values_list(
            "id", "timezone", "onboarded_at", "deactivated_at"
        )
        for week in weeks_finished(timezone=zone, since=onboarded_at, as_of=as_of, settlement_delay=delay)
        if week.period_end > onboarded_at and (deactivated_at is None or week.period_start < deactivated_at)
    }


def _orders_check(window_end: datetime, *, clock_skew: timedelta) -> OrderCheck:
    check = OrderCheck()
    timeout = timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)
    waiting = _orders_explained_waiting(window_end, clock_skew=clock_skew)
    for order in Order.objects.filter(customer_ref__startswith=TRAFFIC_CUSTOMERS):
        check.statuses[order.status] = check.statuses.get(order.status, 0) + 1
        check.accepted_and_cancelled += order.accepted_at is not None and order.cancelled_at is not None
        check.cancelled_early += order.cancelled_at is not None and order.cancelled_at < order.placed_at + timeout
        overdue = order.status == OrderStatus.PLACED and order.placed_at + timeout <= window_end
        check.overdue_unanswered += overdue and order.pk not in waiting
    return check


def _orders_explained_waiting(window_end: datetime, *, clock_skew: timedelta) -> set[int]:
    """Orders still unanswered past their deadline for a reason the design gives:

    - their cancellation run failed and its retry is due after the window closed;
    - their run succeeded and left the order alone, which it does only when the database's
      clock said the deadline had not come (the run was handed out early by a scheduler
      whose clock ran ahead), and no safety-net tick that surely ran after the deadline
      had succeeded when the window closed (a tick may have been claimed, and run,
      ``clock_skew`` early).
    """
    net: datetime | None = JobRun.objects.filter(job_name="cancel-stale-orders", status=RunStatus.SUCCEEDED).aggregate(
        as_of=Max("scheduled_for")
    )["as_of"]
    waiting = set()
    for subject, status, due_at, scheduled_for in JobRun.objects.filter(job_name="cancel-stale-order").values_list(
        "subject", "status", "due_at", "scheduled_for"
    ):
        retrying = status in RETRY_STATUSES and due_at > window_end
        early = status == RunStatus.SUCCEEDED and (net is None or scheduled_for > net - clock_skew)
        if retrying or early:
            waiting.add(int(subject.split(":", 1)[1]))
    return waiting


def _lateness(window_end: datetime) -> dict[str, float]:
    """Start minus tick of the window's cron runs, in simulated seconds (first start of each run)."""
    firsts = (
        JobRunEvent.objects.filter(kind="started", run__trigger=Trigger.CRON, run__scheduled_for__lte=window_end)
        .values("run_id", "run__scheduled_for")
        .annotate(first=Min("at"))
    )
    seconds = sorted((row["first"] - row["run__scheduled_for"]).total_seconds() for row in firsts)
    if not seconds:
        return {}
    p99 = statistics.quantiles(seconds, n=100)[98] if len(seconds) > 1 else seconds[0]
    return {"runs": len(seconds), "p50": statistics.median(seconds), "p99": p99, "max": seconds[-1]}


def _recovery(window_end: datetime) -> dict[str, int]:
    """What the window's runs went through; ``finished_after_the_end``: how many were still
    at work when the window closed and finished while the servers settled."""
    runs = JobRun.objects.filter(scheduled_for__lte=window_end)
    kinds = Counter(JobRunEvent.objects.filter(run__scheduled_for__lte=window_end).values_list("kind", flat=True))
    return {
        "abandoned": kinds["abandoned"],
        "failed_attempts": kinds["failed"],
        "fence_or_finish_rejected": kinds["fail_rejected"] + kinds["finish_rejected"],
        "runs_retried": runs.filter(attempts__gt=1).count(),
        "dead": runs.filter(status=RunStatus.DEAD).count(),
        "finished_after_the_end": runs.filter(finished_at__gt=window_end).count(),
    }


def _problems(report: SimulationReport) -> list[str]:
    problems = []
    if report.duplicate_claims:
        problems.append(f"{report.duplicate_claims} duplicate claims")
    if report.duplicate_charges:
        problems.append(f"{report.duplicate_charges} duplicate probe charges")
    for ticks in [*report.jobs, report.delayed]:
        if ticks.never_claimed:
            problems.append(f"{ticks.job_name}: {ticks.never_claimed} ticks never claimed")
        problems += [f"unfinished: {line}" for line in ticks.broken]
    payouts = report.payouts
    problems += payouts.wrong_amounts
    problems += [f"ledger: {line}" for line in payouts.ledger]
    if payouts.duplicates or payouts.unpaid_weeks:
        problems.append(f"payouts: {payouts.duplicates} duplicates, {payouts.unpaid_weeks} unpaid weeks")
    transfers = report.transfers
    if transfers.missing - transfers.waiting_account:
        problems.append(f"transfers: {transfers.missing - transfers.waiting_account} paid weeks without a transfer")
    if transfers.doubles:
        problems.append(f"transfers: {transfers.doubles} paid twice (more than one transfer for a paid week)")
    problems += [f"transfers: another amount: {line}" for line in transfers.wrong_amounts]
    problems += [f"transfers: unknown to the ledger: {line}" for line in transfers.unknown]
    statements = report.statements
    if statements.payouts_without:
        problems.append(f"statements: {statements.payouts_without} payouts without a statement")
    problems += [f"statements: never sent: {line}" for line in statements.unsent]
    orders = report.orders
    for name in ("accepted_and_cancelled", "cancelled_early", "overdue_unanswered"):
        if getattr(orders, name):
            problems.append(f"orders {name.replace('_', ' ')}: {getattr(orders, name)}")
    return problems


def run_story(*, run_id: int) -> str:
    """One run's transitions in order: 'started (fence 7) -> abandoned -> ... -> succeeded'.
    In the order they were written (id), not by their ``at``: each process stamps events
    with its own clock, and with clocks 90 s apart a scheduler's 'abandoned' sorted after
    the retry's 'succeeded' (chaos seed 5 behind the pooler)."""
    run = JobRun.objects.filter(id=run_id).first()
    if run is None:
        return f"run {run_id}: gone"
    steps = [
        f"{kind} (fence {fence})" if kind == "started" else kind
        for kind, fence in run.events.order_by("id").values_list("kind", "fence")  # written order
        if kind not in ("claimed", "enqueued")
    ]
    return f"{run.job_name} @ {run.scheduled_for:%H:%M} (run {run.id}): " + " -> ".join(steps)
