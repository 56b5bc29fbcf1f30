"""``python -m tests.scenarios.failover_table`` (``make failover``): the database's primary
killed under the running app, once per replication mode, and a table of what it cost.

Each mode runs a scheduler and a worker of the app (``support.processes.Fleet``, as the
scenarios do) against a throwaway cluster, never the machine's server, reached through
libpq's multi-host URL (``target_session_attrs=read-write``), at an accelerated clock with
the simulation's probe jobs: a probe charges once per tick, guarded and fenced like a
payment (``simulation_probe_charges``). And money: a few seeded restaurants connected to
the provider sandbox (a real process, ``simulation/provider_process.py``); just before the
kill (asynchronous: while the WAL sender sleeps) the weekly payout run pays them and the
fleet's sender sends their transfers; after it the same payout tick is run again (the
catch-up) and the fleet's sender sends whatever the new primary wrote.

- **synchronous**: three Patroni members over etcd (``tests/scenarios/patroni_cluster.py``),
  ``synchronous_mode`` on; the leader's postmaster is SIGKILLed, Patroni promotes a replica.
- **asynchronous**: a primary and its streaming standby (``tests/scenarios/cluster.py``); the
  primary's WAL sender is paused (SIGSTOP) while the app keeps claiming and charging, then
  the primary crashes (immediate stop) and the standby is promoted, as a failover manager
  would after its lag check.

Columns (read on the old primary just before the kill, and on the new one at the end):
claims lost (claim rows the old primary had that the new one does not), lost ticks run
again (of those, ticks claimed again on the new primary), ticks run twice (charges beyond
one per tick on the new primary), charges lost and made again (charges the old primary
had that the new one lost, and made again for the same tick: harmless in the database,
where the first one is gone too; a payment sent outside would be sent twice without the
provider's idempotency key), tokens repeated (tokens taken on the new primary that are
not above every token the old one handed out), transfers doubled at provider (transfers
the provider holds beyond one per restaurant-week, counted from its own list), orders lost
(orders the old primary had that the new one does not: each went with its cancellation
run, in the same transaction), orders late (see ``ORDERS_NOTE``), recovery (the kill to the
first claim made on the new primary, real seconds).

The dinner rush runs across the kill: ``manage.py simulate_orders`` places orders at the
dinner-rush scenario's rate and answers most of them; its requests during the outage fail
as a web request would.

Exits 1 if the synchronous mode lost a claim, an order or ran a tick twice, or if either
mode repeated a token, doubled a transfer at the provider or left an order late; 2 when a mode could not run
(binaries missing). Every process it starts (clusters, etcd, the app, the provider
sandbox) is stopped by process group however it ends.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from simulation.provider_process import RunningSandbox, running_sandbox
from support.ports import free_port
from support.processes import (
    PROJECT_DIR,
    Fleet,
    SimulatedTime,
    sigterm_exits,
    stop_group,
    wait_for,
    wait_while_progressing,
)
from tests.scenarios.harness import (
    BOOT_STALL_SECONDS,
    PROCESS_ENVIRONMENT,
    STALL_SECONDS,
    PostgresServer,
    Scenario,
    ScenarioDatabase,
    manage_at,
    wait_runs_succeeded,
)

DATABASE = "tiffin_failover_table"
START = datetime(2027, 3, 9, 10, 0, tzinfo=UTC)  # a Tuesday: no payout tick in the window
SPEED = 60.0  # one simulated minute per real second: a probe tick every second
PROBE_JOB = "sim-probe"  # simulation.services.PROBE_JOB (this module runs without Django)
RUNS_BEFORE = 6  # probe runs succeeded before the fault (and, asynchronous, before the pause)
RUNS_UNREPLICATED = 4  # asynchronous: probe runs succeeded while the WAL sender sleeps
RUNS_AFTER = 6  # probe runs started and succeeded on the new primary
CLAIMS = "SELECT job_name, scheduled_for, subject, created_at FROM job_runs"
CHARGES = "SELECT job_name, scheduled_for, fence FROM simulation_probe_charges"
TOKENS = "SELECT fence FROM job_run_events WHERE kind = 'started' AND fence IS NOT NULL"
RESTAURANTS = 3  # seeded, with one week of orders each, connected to the provider
PROVIDER_KEY = "sk_test_failover_table"
PAYOUTS_JOB = "weekly-payouts"
# Real milliseconds the provider sandbox takes over each transfer request before the
# synchronous mode's kill (its ``slow`` fault): the kill comes while one is in flight.
IN_FLIGHT_DELAY_MS = 1500
# Orders a simulated minute, across the kill: a real second at 60x, beside the jobs' own
# minute ticks, on the cluster's members, the provider and gunicorn; the dinner-rush
# scenario's 20 saturate a loaded two-core machine, and a saturated one measures the machine.
ORDERS_PER_MINUTE = 6
ORDER_TIMEOUT_SECONDS = 600  # ORDER_ACCEPT_TIMEOUT_SECONDS
ORDERS = "SELECT restaurant_id, customer_ref, placed_at FROM orders_order WHERE customer_ref LIKE 'rush-%%'"
# How late the rush's cancellations came before the kill (simulated seconds past the
# deadline): the machine's own lateness at this speed. Twice that (at least
# LATENESS_FLOOR_SECONDS) is allowed beyond the outage: after it, the outage's backlog
# is taken in a burst.
LATENESS_BEFORE = (
    "SELECT coalesce(max(extract(epoch FROM o.cancelled_at - (o.placed_at + %(timeout)s))), 0) FROM orders_order o "
    "WHERE o.customer_ref LIKE 'rush-%%' AND o.status = 'cancelled' AND o.placed_at + %(timeout)s < %(killed)s"
)
LATENESS_FLOOR_SECONDS = 300.0  # five simulated minutes: the safety net's period, five real seconds at 60x
# An order is late when it is still placed past its deadline at the end, or when it was
# cancelled later than the allowance past its deadline, or past the new primary's first
# claim if that came after the deadline: the failover may delay an order by the outage.
ORDERS_LATE = (
    "SELECT count(*) FROM orders_order o WHERE o.customer_ref LIKE 'rush-%%' AND ("
    "(o.status = 'placed' AND o.placed_at + %(timeout)s < %(end)s) OR (o.status = 'cancelled' "
    "AND o.cancelled_at > greatest(o.placed_at + %(timeout)s, %(recovered)s) + %(bound)s))"
)
# A run whose task a worker's cluster took and lost with the old primary (never started,
# never acknowledged) is requeued after SCHEDULER_REQUEUE_AFTER_SECONDS (the fleet's
# default, simulated seconds): its order may be that much later still.
REQUEUE_AFTER_SECONDS = 600
RUSH_CANCELLED_BEFORE = 5  # the kill waits for this many of the rush's orders cancelled
ORDERS_MOST_LATE = (  # simulated seconds past the deadline, of the latest cancellation
    "SELECT coalesce(max(extract(epoch FROM o.cancelled_at - (o.placed_at + %s))), 0) FROM orders_order o "
    "WHERE o.customer_ref LIKE 'rush-%%' AND o.status = 'cancelled'"
)
TRANSFERS_SENT = "SELECT count(*) FILTER (WHERE status = 'sent'), count(*) FROM transfers_transfer"


ORDERS_NOTE = (
    "orders late: still placed past the deadline at the end, or cancelled later past the deadline (or past the "
    "new primary's first claim, if that came after the deadline) than allowed: twice the worst lateness before "
    "the kill (at least five simulated minutes) plus the requeue delay of a run whose task was lost in a worker's "
    "hands (10 min); 'latest' is the latest cancellation's minutes past its deadline"
)


@dataclass(frozen=True)
class ModeResult:
    mode: str
    faults: str
    claims_lost: int
    ticks_run_again: int
    ticks_run_twice: int
    charges_made_again: int
    tokens_repeated: int
    transfers_doubled: int
    orders_lost: int
    orders_late: int
    most_late_minutes: float  # simulated minutes past the deadline, of the latest cancellation
    late_bound_minutes: float  # the lateness allowed beyond the outage: the worst before the kill
    web_failures: int  # /healthz answers that were not a 200 or a 503 with its report (or none)
    web_back_seconds: float  # the kill to /healthz's first "database": "ok" on the new primary
    web_down_after_back: int  # answers without the database after that first "ok"
    recovery_seconds: float

    def problems(self) -> list[str]:
        """What makes the table fail: the synchronous mode losing or doubling anything, a
        token repeated in either mode."""
        found = [f"{self.tokens_repeated} tokens repeated"] if self.tokens_repeated else []
        found += [f"{self.transfers_doubled} transfers doubled at provider"] if self.transfers_doubled else []
        found += [f"{self.orders_late} orders late"] if self.orders_late else []
        found += [f"{self.web_failures} web requests failed"] if self.web_failures else []
        found += [f"{self.web_down_after_back} web answers lost the database again"] if self.web_down_after_back else []
        if self.mode == "synchronous":
            found += [f"{self.claims_lost} claims lost"] if self.claims_lost else []
            found += [f"{self.ticks_run_twice} ticks run twice"] if self.ticks_run_twice else []
            found += [f"{self.ticks_run_again} lost ticks run again"] if self.ticks_run_again else []
            found += [f"{self.charges_made_again} charges made again"] if self.charges_made_again else []
            found += [f"{self.orders_lost} orders lost"] if self.orders_lost else []
        return found

    def row(self) -> str:
        return (
            f"| {self.mode} | {self.faults} | {self.claims_lost} | {self.ticks_run_again} | {self.ticks_run_twice} "
            f"| {self.charges_made_again} | {self.tokens_repeated} | {self.transfers_doubled} "
            f"| {self.orders_lost} | {self.orders_late} (latest {self.most_late_minutes:.0f} min past, "
            f"{self.late_bound_minutes:.0f} min allowed beyond the outage) "
            f"| {self.web_failures} failed, back in {self.web_back_seconds:.1f} s, "
            f"{self.web_down_after_back} down after "
            f"| {self.recovery_seconds:.1f} s |"
        )


HEADER = (
    "| mode | faults | claims lost | lost ticks run again | ticks run twice | charges lost and made again "
    "| tokens repeated | transfers doubled at provider | orders lost | orders late | web (/healthz) | recovery |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


@dataclass(frozen=True)
class Snapshot:
    """What the old primary held just before the kill."""

    claims: set[tuple[object, ...]]
    charges: set[tuple[object, ...]]
    tokens: list[int]
    orders: set[tuple[object, ...]]
    payout_tick: datetime  # the payout run's tick, run again on the new primary
    transfers: tuple[int, int]  # (sent, written) at the kill


@dataclass(frozen=True)
class WebAnswers:
    """What /healthz answered across the failover: (real monotonic time it was asked, "ok" |
    "database down" | "failed: why") every POLL_SECONDS."""

    answers: list[tuple[float, str]]

    def failures(self) -> int:
        return sum(1 for _, answer in self.answers if answer.startswith("failed"))

    def back_after(self, killed_at: float) -> float | None:
        """Real seconds from the kill to the first answer with the database after the web
        noticed the outage (its first other answer; a request on its way at the kill may
        still find the old primary); 0.0 if it never noticed, None if it never came back."""
        after = [(at, answer) for at, answer in self.answers if at > killed_at]
        noticed = next((i for i, (_, answer) in enumerate(after) if answer != "ok"), None)
        if noticed is None:
            return 0.0 if after else None
        return next((at - killed_at for at, answer in after[noticed:] if answer == "ok"), None)

    def story(self, killed_at: float) -> str:
        """The answers from the kill on, runs of the same one with how long each lasted:
        "database down 4.9 s, ok 31.0 s"."""
        after = [(at, answer) for at, answer in self.answers if at > killed_at]
        runs: list[tuple[str, float, float]] = []  # answer, first asked, last asked
        for at, answer in after:
            if runs and runs[-1][0] == answer:
                runs[-1] = (answer, runs[-1][1], at)
            else:
                runs.append((answer, at, at))
        spans = [
            (answer, (runs[i + 1][1] if i + 1 < len(runs) else last) - first)
            for i, (answer, first, last) in enumerate(runs)
        ]
        return ", ".join(f"{answer} {seconds:.1f} s" for answer, seconds in spans) or "no answer"

    def down_after_back(self, killed_at: float) -> int:
        back = self.back_after(killed_at)
        if back is None:
            return 0
        return sum(1 for at, answer in self.answers if at > killed_at + back and answer != "ok")


POLL_SECONDS = 0.25


@contextmanager
def web_probed(scenario: Scenario, clock: SimulatedTime) -> Iterator[WebAnswers]:
    """gunicorn (deploy/gunicorn.conf.py, two workers) on the fleet's database, and a thread
    asking its /healthz every POLL_SECONDS; both stopped however the block ends. A 200 or a
    503 with its report is an answer; anything else (a 500, a refused connection, no answer
    within WEB_TIMEOUT_SECONDS) is a failure."""
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "tiffin.wsgi", "--config", "deploy/gunicorn.conf.py"]
    argv += ["--workers", "2", "--bind", f"127.0.0.1:{port}"]
    environment = {**scenario.fleet.environment, **clock.environment(), "WEB_THREADS": "1"}
    with (scenario.fleet.log_dir / "web.log").open("wb") as log:
        popen = subprocess.Popen(
            argv, env=environment, cwd=PROJECT_DIR, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/healthz"
    answers = WebAnswers(answers=[])
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            asked = time.monotonic()
            answers.answers.append((asked, _healthz(url)))

    poller = threading.Thread(target=poll, name="healthz", daemon=True)
    try:
        wait_for(lambda: _healthz(url) == "ok", timeout=120, interval=0.2, what="gunicorn answering /healthz")
        poller.start()
        yield answers
    finally:
        stop.set()
        if poller.is_alive():
            poller.join()
        stop_group(popen, grace=10)


WEB_TIMEOUT_SECONDS = 10.0


def _healthz(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=WEB_TIMEOUT_SECONDS) as response:
            body = response.read()
    except urllib.error.HTTPError as error:  # before OSError, of which it is one
        if error.code != 503:
            return f"failed: HTTP {error.code}"
        body = error.read()
    except OSError as error:  # refused, reset, timed out
        return f"failed: {error}"
    try:
        database = json.loads(body)["database"]
    except (ValueError, KeyError, TypeError):
        return "failed: not /healthz's report"
    return "ok" if database == "ok" else "database down"


@dataclass(frozen=True)
class Exercised:
    snapshot: Snapshot
    new_db: ScenarioDatabase
    recovery: float  # real seconds from the kill to the first claim on the new primary
    killed_at: float  # time.monotonic() at the kill
    killed: datetime  # the fleet's clock at the kill
    recovered: datetime  # the first claim on the new primary (the fleet's clock)
    end: datetime  # the fleet's clock when everything settled
    web: WebAnswers


def exercise(
    scenario: Scenario,
    *,
    fault: Callable[[], ScenarioDatabase],
    before_fault: Callable[[], None] | None = None,
    in_flight_at: RunningSandbox | None = None,
) -> Exercised:
    """Run the app until RUNS_BEFORE probe runs succeeded, call ``before_fault`` (and wait
    for RUNS_UNREPLICATED more), pay the week and wait for its transfers sent (or, with
    ``in_flight_at``, the provider sandbox slowed, kill while a transfer request of the
    fleet's sender is in flight there: sent, not yet answered), read the old primary, apply
    ``fault`` (the kill; it returns the new primary's database), wait for a claim and
    RUNS_AFTER runs there, run the payout tick again and wait for the new ledger's
    transfers sent, and drain; the web process's /healthz is asked throughout."""
    clock = SimulatedTime.starting(START, speed=SPEED, lead=3.0)
    with web_probed(scenario, clock) as web:
        return _exercise(scenario, clock, web, fault=fault, before_fault=before_fault, in_flight_at=in_flight_at)


def _exercise(
    scenario: Scenario,
    clock: SimulatedTime,
    web: WebAnswers,
    *,
    fault: Callable[[], ScenarioDatabase],
    before_fault: Callable[[], None] | None,
    in_flight_at: RunningSandbox | None,
) -> Exercised:
    scenario.start_workers(clock, 1, q_workers=2)
    scenario.start_schedulers(clock, 1)
    # The dinner rush, across the kill: orders placed and answered (each order and its
    # delayed cancellation commit together); what nobody answers in time is cancelled.
    rush = ["simulate_orders", "--per-minute", str(ORDERS_PER_MINUTE), "--minutes", "1440"]
    scenario.fleet.start("orders", rush, env=clock.environment())
    done = wait_runs_succeeded(scenario.db, PROBE_JOB, RUNS_BEFORE, stall=BOOT_STALL_SECONDS)
    cancelled = "SELECT count(*) FROM orders_order WHERE customer_ref LIKE 'rush-%%' AND status = 'cancelled'"
    # Each cancellation is a step; the first comes an order's deadline after the rush began.
    wait_while_progressing(
        lambda: max(RUSH_CANCELLED_BEFORE - int(scenario.db.scalar(cancelled)), 0),
        stall=STALL_SECONDS + ORDER_TIMEOUT_SECONDS / SPEED,
        what=f"{RUSH_CANCELLED_BEFORE} of the rush's orders cancelled (the lateness before the kill)",
    )
    if before_fault is not None:
        before_fault()
        wait_runs_succeeded(scenario.db, PROBE_JOB, done + RUNS_UNREPLICATED)
    if in_flight_at is not None:
        in_flight_at.arm_fault("slow", delay_ms=IN_FLIGHT_DELAY_MS, methods=("POST",))
    _pay(scenario, clock, scheduled_for=None)
    if in_flight_at is None:
        _wait_transfers_sent(scenario.db)
    else:
        sandbox = in_flight_at
        wait_for(
            lambda: bool(sandbox.state()["in_flight"]), timeout=120, interval=0.05, what="a transfer request in flight"
        )
    [(payout_tick,)] = scenario.db.rows(
        "SELECT scheduled_for FROM job_runs WHERE job_name = %s ORDER BY id DESC LIMIT 1", [PAYOUTS_JOB]
    )
    snapshot = Snapshot(
        claims=set(scenario.db.rows(CLAIMS)),
        charges=set(scenario.db.rows(CHARGES)),
        tokens=[row[0] for row in scenario.db.rows(TOKENS)],
        orders=set(scenario.db.rows(ORDERS)),
        payout_tick=payout_tick,
        transfers=scenario.db.rows(TRANSFERS_SENT)[0],
    )
    killed_at = time.monotonic()
    killed_instant = clock.now()
    new_db = fault()
    if in_flight_at is not None:
        in_flight_at.clear_fault()
    claimed = "SELECT count(*) FROM job_runs WHERE created_at > %s"
    wait_for(
        lambda: _quiet_scalar(new_db, claimed, [killed_instant]) > 0,
        timeout=180,
        interval=0.1,
        what="a claim on the new primary",
    )
    recovery = time.monotonic() - killed_at
    [(recovered,)] = new_db.rows("SELECT min(created_at) FROM job_runs WHERE created_at > %s", [killed_instant])
    started_after = (
        "SELECT count(*) FROM job_runs r WHERE r.job_name = %s AND r.status = 'succeeded' AND r.started_at > %s"
    )
    wait_while_progressing(
        lambda: max(RUNS_AFTER - _quiet_scalar(new_db, started_after, [PROBE_JOB, killed_instant]), 0),
        stall=STALL_SECONDS,
        what=f"{RUNS_AFTER} probe runs on the new primary",
    )
    _pay(scenario, clock, scheduled_for=snapshot.payout_tick)  # the catch-up
    _wait_transfers_sent(new_db)
    scenario.stop("orders")
    # The rush's last deadlines are up to ORDER_TIMEOUT_SECONDS ahead: wait while orders are
    # cancelled and runs finish (stopping the schedulers would leave due runs unclaimed).
    left = (
        "SELECT (SELECT count(*) FROM orders_order WHERE customer_ref LIKE 'rush-%%' AND status = 'placed') + "
        "(SELECT count(*) FROM job_runs WHERE job_name = 'cancel-stale-order' "
        "AND status IN ('scheduled', 'enqueued', 'running'))"
    )
    stall = STALL_SECONDS + ORDER_TIMEOUT_SECONDS / SPEED
    wait_while_progressing(lambda: int(new_db.scalar(left)), stall=stall, what="the rush's cancellations")
    scenario.stop("scheduler")
    Scenario(db=new_db, fleet=scenario.fleet).wait_until_idle()
    scenario.stop("worker")
    return Exercised(
        snapshot=snapshot,
        new_db=new_db,
        recovery=recovery,
        killed_at=killed_at,
        killed=killed_instant,
        recovered=recovered,
        end=clock.now(),
        web=web,
    )


def measure(mode: str, faults: str, exercised: Exercised, sandbox: RunningSandbox) -> ModeResult:
    snapshot, new_db, killed = exercised.snapshot, exercised.new_db, exercised.killed
    claims_now = set(new_db.rows(CLAIMS))
    lost = snapshot.claims - claims_now
    ticks_now = {claim[:3] for claim in claims_now}
    charges_now = set(new_db.rows(CHARGES))
    charges: dict[tuple[object, object], int] = {}
    for job_name, tick, _ in charges_now:
        charges[(job_name, tick)] = charges.get((job_name, tick), 0) + 1
    charges_lost = snapshot.charges - charges_now
    new_tokens = [row[0] for row in new_db.rows(TOKENS + " AND at > %s", [killed])]
    highest_old = max(snapshot.tokens, default=0)
    timeout = timedelta(seconds=ORDER_TIMEOUT_SECONDS)
    [(before,)] = new_db.rows(LATENESS_BEFORE, {"timeout": timeout, "killed": killed})
    bound = timedelta(seconds=max(2 * float(before), LATENESS_FLOOR_SECONDS) + REQUEUE_AFTER_SECONDS)
    print(f"{mode}: /healthz after the kill: {exercised.web.story(exercised.killed_at)}", file=sys.stderr)
    late = {"timeout": timeout, "end": exercised.end, "recovered": exercised.recovered, "bound": bound}
    [(orders_late,)] = new_db.rows(ORDERS_LATE, late)
    [(most_late,)] = new_db.rows(ORDERS_MOST_LATE, [timeout])
    return ModeResult(
        mode=mode,
        faults=faults,
        claims_lost=len(lost),
        ticks_run_again=sum(1 for claim in lost if claim[:3] in ticks_now),
        ticks_run_twice=sum(count - 1 for count in charges.values()),
        charges_made_again=sum(1 for job_name, tick, _ in charges_lost if (job_name, tick) in charges),
        tokens_repeated=sum(1 for token in new_tokens if token <= highest_old),
        transfers_doubled=sum(count - 1 for count in _provider_transfers_per_group(sandbox).values()),
        orders_lost=len(snapshot.orders - set(new_db.rows(ORDERS))),
        orders_late=int(orders_late),
        most_late_minutes=float(most_late) / 60,
        late_bound_minutes=bound.total_seconds() / 60,
        web_failures=exercised.web.failures(),
        web_back_seconds=exercised.web.back_after(exercised.killed_at) or float("nan"),
        web_down_after_back=exercised.web.down_after_back(exercised.killed_at),
        recovery_seconds=exercised.recovery,
    )


def run_synchronous(log_dir: Path) -> ModeResult:
    from tests.scenarios.patroni_cluster import patroni_cluster

    with patroni_cluster() as cluster:
        leader = cluster.leader()
        leader.server.create_database(DATABASE)
        url = cluster.url(DATABASE)
        _migrate(url)
        _seed(url, leader.server)
        cluster.set_synchronous_mode(True)
        with _scenario(url, leader.server, log_dir / "synchronous") as (scenario, sandbox):

            def kill_leader() -> ScenarioDatabase:
                old = cluster.leader()
                cluster.kill_postmaster(old)
                return ScenarioDatabase(server=cluster.leader().server, name=DATABASE)

            exercised = exercise(scenario, fault=kill_leader, in_flight_at=sandbox)
            sent, written = exercised.snapshot.transfers
            faults = f"leader SIGKILL in the dinner rush, a transfer request in flight ({sent} of {written} sent)"
            return measure("synchronous", faults, exercised, sandbox)


def run_asynchronous(log_dir: Path) -> ModeResult:
    from tests.scenarios.cluster import replicated_pair
    from tests.scenarios.replication import pause_wal_sender, wait_replayed

    with replicated_pair() as (primary, standby):
        primary.server.create_database(DATABASE)
        hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        url = f"postgres://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"
        _migrate(url)
        _seed(url, primary.server)
        wait_replayed(primary.server)
        with _scenario(url, primary.server, log_dir / "asynchronous") as (scenario, sandbox):

            def crash_and_promote() -> ScenarioDatabase:
                primary.stop_immediate()
                standby.promote()
                return ScenarioDatabase(server=standby.server, name=DATABASE)

            exercised = exercise(
                scenario, fault=crash_and_promote, before_fault=lambda: pause_wal_sender(primary.server)
            )
            return measure(
                "asynchronous",
                "WAL sender paused, primary crash in the dinner rush, promote",
                exercised,
                sandbox,
            )


@contextmanager
def _scenario(url: str, server: PostgresServer, log_dir: Path) -> Iterator[tuple[Scenario, RunningSandbox]]:
    """The app's fleet (none started yet) and the provider sandbox it pays through, both
    stopped however the block ends."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with running_sandbox(state_path=log_dir / "provider.sqlite3", log_path=log_dir / "provider.log") as sandbox:
        environment = {
            "DATABASE_URL": url,
            **PROCESS_ENVIRONMENT,
            "SCHEDULER_EXTRA_JOB_MODULES": "simulation.probe_jobs",
            "PAYMENT_PROVIDER_URL": sandbox.url,
            "PAYMENT_PROVIDER_KEY": PROVIDER_KEY,
        }
        with Fleet(environment=environment, log_dir=log_dir, grace=8.0) as fleet:
            scenario = Scenario(db=ScenarioDatabase(server=server, name=DATABASE), fleet=fleet)
            try:
                yield scenario, sandbox
            except BaseException:
                print(fleet.log_tails(lines=30))
                raise


def _seed(url: str, server: PostgresServer) -> None:
    """RESTAURANTS restaurants with a week of orders before START, each connected to the
    provider (``seed_demo``, as the transfer scenarios seed)."""
    weeks = ["--restaurants", str(RESTAURANTS), "--weeks", "1", "--now", START.isoformat()]
    _manage(url, "seed_demo", *weeks)
    with server.connect(DATABASE) as conn:
        conn.execute("UPDATE orders_restaurant SET provider_account = 'acct_Seeded' || id")


def _pay(scenario: Scenario, clock: SimulatedTime, *, scheduled_for: datetime | None) -> None:
    """The weekly payout run, executed here at the fleet's clock: its latest tick, or
    ``scheduled_for``. The fleet's sender sends the transfers it writes."""
    tick = ["--scheduled-for", scheduled_for.isoformat()] if scheduled_for is not None else []
    paid = scenario.manage("run_job", PAYOUTS_JOB, "--sync", *tick, clock=clock)
    if paid.returncode != 0:
        raise RuntimeError(f"the payout run failed:\n{paid.stderr}")


def _wait_transfers_sent(db: ScenarioDatabase) -> None:
    """Wait until the ledger has transfers and every one is sent (by the fleet's sender), for
    as long as more are sent (each one sent is a step)."""

    def unsent() -> int:  # no transfer written yet counts as one to send
        try:
            [(sent, written)] = db.rows(TRANSFERS_SENT)
        except Exception:  # psycopg.OperationalError: a promotion under way
            return sys.maxsize  # read nothing: no step
        return written - sent if written else 1

    wait_while_progressing(unsent, stall=STALL_SECONDS, what="the payout's transfers sent")


def _provider_transfers_per_group(sandbox: RunningSandbox) -> Counter[str]:
    """The provider's own list (``GET /v1/transfers``, every page): transfers per group."""
    groups: Counter[str] = Counter()
    after = ""
    while True:
        query = "limit=100" + (f"&starting_after={after}" if after else "")
        request = urllib.request.Request(f"{sandbox.url}/v1/transfers?{query}")
        request.add_header("Authorization", f"Bearer {PROVIDER_KEY}")
        with urllib.request.urlopen(request, timeout=10) as response:
            page = json.loads(response.read())
        groups.update(str(item.get("transfer_group") or "") for item in page["data"])
        if not page.get("has_more") or not page["data"]:
            return groups
        after = page["data"][-1]["id"]


def _migrate(url: str) -> None:
    _manage(url, "migrate", "--noinput", "--verbosity", "0")


def _manage(url: str, *args: str) -> None:
    done = manage_at(url, *args)
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stderr}")


def _quiet_scalar(db: ScenarioDatabase, query: str, params: list[object]) -> int:
    """``db.scalar``, 0 while the server is not there yet (a promotion under way)."""
    try:
        return int(db.scalar(query, params) or 0)
    except Exception:  # psycopg.OperationalError, or a standby still read-only
        return 0


MODES = {"synchronous": run_synchronous, "asynchronous": run_asynchronous}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.scenarios.failover_table", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--modes", default="synchronous,asynchronous", help="comma-separated, of: " + ", ".join(MODES))
    options = parser.parse_args(argv)
    modes = [mode.strip() for mode in options.modes.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        print(f"unknown mode(s) {unknown or modes}: choose from {', '.join(MODES)}", file=sys.stderr)
        return 2
    with sigterm_exits(), tempfile.TemporaryDirectory(prefix="tiffin-failover-table-") as logs:
        results = []
        for mode in modes:
            began = time.monotonic()
            try:
                results.append(MODES[mode](Path(logs)))
                print(f"{mode}: done in {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
            except BaseException as error:
                if type(error).__name__ == "Skipped":  # pytest.skip from a missing binary
                    print(f"{mode}: cannot run: {error}", file=sys.stderr)
                    return 2
                raise
    print(ORDERS_NOTE)
    print(HEADER)
    for result in results:
        print(result.row())
    problems = [f"{result.mode}: {problem}" for result in results for problem in result.problems()]
    for problem in problems:
        print(f"FAILED {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
