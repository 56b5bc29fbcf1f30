"""``manage.py simulate``: run the project as a small cluster on an accelerated clock,
inject faults, and report whether every job ran once, on time."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import connection

from scheduling.registry import registry
from simulation.chaos import DEFAULT_RATE, ChaosRecord, ChaosSchedule, ChaosSimulation, chaos_schedule
from simulation.provider_process import RunningSandbox, start_sandbox
from simulation.report import JobTicks, SimulationReport, simulation_report
from simulation.runner import (
    SENDER_KILL_BY,
    SIMULATED_PROVIDER_TIMEOUT_SECONDS,
    TARGET_JOB,
    Fault,
    FaultKind,
    Simulation,
    SimulationOutcome,
    SimulationPlan,
    parse_duration,
)
from simulation.services import PROBE_JOBS, SimulationResetError, simulation_reset, simulation_state_counts
from simulation.strategy_command import strategy_command
from simulation.strategy_runner import add_strategy_arguments, strategy_requested
from support import pgbouncer
from support.processes import sigterm_exits
from tiffin import clock
from tiffin.cli import TiffinCommand, parse_finite, parse_instant

# Above this, a job's 600 s timeout lasts under a real second and busy machines lose runs.
MAX_SPEED = 600.0
DEFAULT_FAULT_AT = {
    FaultKind.KILL_SCHEDULER: 0.25,
    FaultKind.CRASH_WORKER: 0.4,
    FaultKind.PAUSE_WORKER: 0.6,
    FaultKind.KILL_SENDER: 0.25,
}
DEFAULT_LASTING = {
    FaultKind.KILL_SCHEDULER: timedelta(0),
    FaultKind.KILL_SENDER: timedelta(minutes=2),
    FaultKind.CRASH_WORKER: timedelta(minutes=2),  # a supervisor restarting the process
    FaultKind.PAUSE_WORKER: timedelta(minutes=8),  # longer than sim-settlement's 300 s timeout
}


class Command(TiffinCommand):
    help = (
        "Run N servers (each a scheduler loop and a django-q2 worker process) plus order traffic against "
        "the configured database on an accelerated clock, inject faults, then print what happened: ticks "
        "expected and run, duplicates, misses, skips by reason, payouts checked against orders, lateness. "
        "Exits 1 if any invariant broke. Adds two probe jobs (sim-probe, sim-settlement) to the project's."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--servers", type=int, default=3, help="servers (default 3)")
        parser.add_argument("--workers", type=int, default=2, help="django-q2 workers per server (default 2)")
        parser.add_argument("--duration", default="2h", help="simulated time to run, e.g. 90m, 2h, 1d (default 2h)")
        parser.add_argument("--speed", type=parse_finite, default=120.0, help="simulated seconds per real second (120)")
        parser.add_argument(
            "--start", help="simulated start, ISO 8601 (default: the latest Sunday 20:00 UTC, before the payout tick)"
        )
        parser.add_argument("--skew", type=parse_finite, default=0.0, help="spread scheduler clocks over +-SECONDS")
        parser.add_argument(
            "--orders-per-minute", type=parse_finite, default=6.0, help="order traffic (default 6; 0: none)"
        )
        for kind, metavar, help_text in (
            (
                FaultKind.CRASH_WORKER,
                "AT[:FOR]",
                "SIGKILL the worker running the fault job at AT, restart it FOR later",
            ),
            (
                FaultKind.PAUSE_WORKER,
                "AT[:FOR]",
                "SIGSTOP the worker running the fault job at AT, SIGCONT it FOR later, once a scheduler took its run",
            ),
            (FaultKind.KILL_SCHEDULER, "AT", "SIGKILL server 1's scheduler at AT, for good"),
            (
                FaultKind.KILL_SENDER,
                "AT[:FOR]",
                "from AT, wait for a send-transfers run with requests in flight at the provider and SIGKILL its "
                "worker mid-batch, restart it FOR later; past "
                f"{SENDER_KILL_BY * 100:.0f}%% of the duration it waits only while a payout run is on its way "
                "or a transfer is pending",
            ),
        ):
            default = f"{DEFAULT_FAULT_AT[kind] * 100:.0f}%% of the duration"  # argparse formats help with %
            if DEFAULT_LASTING[kind]:
                default += f", FOR {DEFAULT_LASTING[kind].total_seconds() / 60:g}m"
            parser.add_argument(
                f"--{kind}", nargs="?", const=True, metavar=metavar, help=f"{help_text} (default AT {default})"
            )
        parser.add_argument(
            "--chaos",
            type=int,
            metavar="SEED",
            help="instead of the faults above, a schedule of random faults drawn from SEED (printed first; "
            "the same seed replays it): kills, pauses, dropped connections, clock skew, servers joining and leaving",
        )
        parser.add_argument(
            "--chaos-rate",
            type=parse_finite,
            default=DEFAULT_RATE,
            metavar="N",
            help=f"with --chaos: faults per simulated hour, an eighth of them of each kind, plus the payout kill "
            f"(default {DEFAULT_RATE:g}: two of each in an hour)",
        )
        parser.add_argument(
            "--leader-kills",
            type=int,
            default=0,
            metavar="N",
            help="with --chaos on a high-availability PostgreSQL cluster on this machine (a multi-host DATABASE_URL, "
            "Patroni promoting a standby): N more faults that SIGKILL the primary's postmaster (default 0)",
        )
        parser.add_argument(
            "--fault-job",
            default=TARGET_JOB,
            metavar="JOB",
            help=f"the job whose running run a crash or a pause hits (default {TARGET_JOB}; the demo: weekly-payouts)",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="first forget job runs and schedules (development settings only; refused while payouts exist)",
        )
        parser.add_argument("--log-dir", help="keep each process's log here (default: a temporary directory)")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        add_strategy_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        # SIGTERM (a supervisor, the chaos table stopping a seed) stops every process the
        # simulation started, as Ctrl-C does, instead of ending this one and orphaning them.
        with sigterm_exits():
            self._simulate(options)

    def _simulate(self, options: dict[str, Any]) -> None:
        plan = _plan(options)
        if strategy_requested(options):  # the alternatives side by side: simulation/strategy_command.py
            strategy_command(plan, options, stdout=self.stdout, prepare=lambda: self._prepare(reset=options["reset"]))
            return
        chaos = _chaos(options, plan)
        if options["pooler"] and connection.vendor != "postgresql":
            raise CommandError("--pooler puts the processes behind PgBouncer: it needs a postgres:// DATABASE_URL")
        if options["pooler"] and pgbouncer.pgbouncer_binary() is None:
            raise CommandError("--pooler needs pgbouncer (make scenario-deps, or apt-get install pgbouncer)")
        self._prepare(reset=options["reset"])
        log_dir = Path(options["log_dir"] or tempfile.mkdtemp(prefix="tiffin-simulate-"))
        log_dir.mkdir(parents=True, exist_ok=True)  # make demo's db/demo-logs on a fresh clone
        say = (lambda line: print(line, file=sys.stderr)) if options["json"] else self.stdout.write
        real = plan.duration.total_seconds() / plan.speed
        say(
            f"simulating {plan.duration} of {plan.start:%Y-%m-%d %H:%M} UTC onwards in about {real:.0f} s "
            "(longer if the processes lag the clock: it is then slowed)"
        )
        if chaos is not None:
            for line in chaos.lines():
                say(line)
        mail_dir = log_dir / "mail"
        pooling = _pooled(enabled=options["pooler"], connections=options["pooler_connections"])
        with pooling as pooled, _provider(log_dir) as sandbox:
            plan = replace(plan, environment={**plan.environment, **_money_environment(sandbox, mail_dir)})
            say(f"the payment provider: provider_sandbox at {sandbox.url}; statements written to {mail_dir}")
            if pooled is not None:
                plan = replace(plan, environment={**plan.environment, "DATABASE_URL": pooled.url})
                say(f"every process behind a private PgBouncer in transaction mode on port {pooled.port}")
            simulation = (
                Simulation(plan, log_dir=log_dir, say=say, provider=sandbox)
                if chaos is None
                else ChaosSimulation(plan, chaos, log_dir=log_dir, say=say, pooled=pooled, provider=sandbox)
            )
            outcome = simulation.run()
            skew = plan.skew if chaos is None else chaos.max_skew
            report = simulation_report(
                extra_problems=_process_problems(outcome),
                clock_skew=skew,
                provider_url=sandbox.url,
                mail_dir=mail_dir,
                window_end=min(outcome.ended_at or plan.end, plan.end),  # the servers went on after it to settle
                struck=simulation.struck if isinstance(simulation, ChaosSimulation) else None,
            )
        if options["json"]:
            plan_json = _plan_json(plan, outcome, pooled=options["pooler"])
            data = {**report.as_json(), **plan_json, **_chaos_json(chaos, outcome)}
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            self.stdout.write("\n".join(render_text(report, plan, outcome, log_dir, pooled=options["pooler"])))
        if outcome.stopped_by is not None:  # SIGTERM or Ctrl-C: the report is out, exit as the signal asked
            raise SystemExit(outcome.stopped_by)
        if not report.ok:
            raise CommandError(f"{len(report.problems)} invariants broke (logs in {log_dir})", returncode=1)

    def _prepare(self, *, reset: bool) -> None:
        if reset:
            try:
                simulation_reset(development=settings.DEBUG)
            except SimulationResetError as error:
                raise CommandError(f"--reset: {error}") from None
            return
        left = {what: n for what, n in simulation_state_counts().items() if n}
        if left:
            found = ", ".join(f"{n} {what}" for what, n in left.items())
            raise CommandError(f"the database already has {found}; pass --reset to forget them first")


@contextmanager
def _pooled(*, enabled: bool, connections: int) -> Iterator[pgbouncer.Pooled | None]:
    """With ``--pooler``, a private transaction-mode PgBouncer (up to ``connections``
    server connections) in front of the database for the run's processes (the command's
    own connections stay direct); stopped after the run."""
    if not enabled:
        yield None
        return
    with pgbouncer.pooled_database(settings.DATABASES["default"], pool_size=connections) as pooled:
        yield pooled


@contextmanager
def _provider(log_dir: Path) -> Iterator[RunningSandbox]:
    """The run's payment provider: a provider sandbox of its own (a real process, its
    state in the log directory), stopped after the run and its report."""
    state = log_dir / "provider.sqlite3"
    for path in (state, *(state.with_name(state.name + suffix) for suffix in ("-wal", "-shm"))):
        path.unlink(missing_ok=True)  # a reused log directory: the provider starts empty, as the ledger does
    sandbox = start_sandbox(state_path=state, log_path=log_dir / "provider.log")
    try:
        yield sandbox
    finally:
        sandbox.stop()


def _money_environment(sandbox: RunningSandbox, mail_dir: Path) -> dict[str, str]:
    """The processes pay through the run's sandbox and write statements to ``mail_dir``
    (Django's file-based backend, one file per connection), where the report reads them."""
    shutil.rmtree(mail_dir, ignore_errors=True)  # a reused log directory: only this run's mail
    mail_dir.mkdir(parents=True)
    return {
        "PAYMENT_PROVIDER_URL": sandbox.url,
        "PAYMENT_PROVIDER_KEY": "sk_test_simulation",
        "PAYMENT_PROVIDER_TIMEOUT_SECONDS": str(SIMULATED_PROVIDER_TIMEOUT_SECONDS),
        "STATEMENTS_EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(mail_dir),
    }


# Schedulers look for due runs every 0.2 real seconds; django-q2 polls every 0.05.
_PROCESS_ENVIRONMENT = {"SCHEDULER_POLL_SECONDS": "0.2", "Q_POLL_SECONDS": "0.05", "LOG_LEVEL": "INFO"}


def _plan(options: dict[str, Any]) -> SimulationPlan:
    try:
        duration = parse_duration(options["duration"])
        faults = tuple(_faults(options, duration))
    except ValueError as error:
        raise CommandError(str(error)) from None
    _check_numbers(options, duration, faults)
    if options["fault_job"] not in {job.name for job in registry.cron_jobs()} | set(PROBE_JOBS):
        raise CommandError(f"--fault-job {options['fault_job']!r}: not a cron job of this project or a probe job")
    return SimulationPlan(
        servers=options["servers"],
        workers=options["workers"],
        start=parse_instant(options["start"], option="--start") if options["start"] else _latest_sunday_evening(),
        duration=duration,
        speed=options["speed"],
        skew=options["skew"],
        orders_per_minute=options["orders_per_minute"],
        faults=faults,
        fault_job=options["fault_job"],
        environment={"SCHEDULER_EXTRA_JOB_MODULES": "simulation.probe_jobs", **_PROCESS_ENVIRONMENT},
    )


def _chaos(options: dict[str, Any], plan: SimulationPlan) -> ChaosSchedule | None:
    if options["chaos"] is None:
        if options["chaos_rate"] != DEFAULT_RATE:
            raise CommandError("--chaos-rate goes with --chaos SEED")
        if options["leader_kills"]:
            raise CommandError("--leader-kills goes with --chaos SEED")
        return None
    if plan.faults or plan.skew:
        raise CommandError("--chaos draws its own faults and clock skews: leave out the fault options and --skew")
    if plan.servers < 2:
        raise CommandError("--chaos needs at least 2 servers (its faults take servers down)")
    postgres = connection.vendor == "postgresql"
    if options["leader_kills"] < 0 or (options["leader_kills"] and not postgres):
        raise CommandError(f"--leader-kills {options['leader_kills']}: give 0 or more, on PostgreSQL")
    try:
        return chaos_schedule(
            seed=options["chaos"],
            start=plan.start,
            duration=plan.duration,
            servers=plan.servers,
            postgres=postgres,
            rate=options["chaos_rate"],
            leader_kills=options["leader_kills"],
        )
    except ValueError as error:
        raise CommandError(f"--chaos-rate {options['chaos_rate']:g}: {error}") from None


def _chaos_json(chaos: ChaosSchedule | None, outcome: SimulationOutcome) -> dict[str, Any]:
    if chaos is None:
        return {}
    records = [record for record in outcome.faults if isinstance(record, ChaosRecord)]
    injected = Counter(str(record.fault.kind) for record in records if record.injected)
    return {
        "chaos": {
            "seed": chaos.seed,
            "schedule": chaos.lines(),
            "by_kind": chaos.by_kind(),
            "injected_by_kind": {kind: injected[kind] for kind in chaos.by_kind()},
            "faults": [record.as_json() for record in records],
        }
    }


def _faults(options: dict[str, Any], duration: timedelta) -> list[Fault]:
    faults = []
    for kind in FaultKind:
        text = options[kind.replace("-", "_")]
        if text is None:
            continue
        if text is True:  # the option alone: the default instant
            text = f"{duration.total_seconds() * DEFAULT_FAULT_AT[kind]:.0f}s"
        fault = Fault.parse(kind, text, default_lasting=DEFAULT_LASTING[kind])
        if not timedelta(0) < fault.at < duration:
            raise ValueError(f"--{kind} {text}: the fault must come inside the {duration} simulated")
        faults.append(fault)
    return faults


def _check_numbers(options: dict[str, Any], duration: timedelta, faults: tuple[Fault, ...]) -> None:
    if not 1 <= options["servers"] <= 16:
        raise CommandError(f"--servers {options['servers']}: give 1 to 16")
    if not 1 <= options["workers"] <= 8:
        raise CommandError(f"--workers {options['workers']}: give 1 to 8")
    if not 0 < options["speed"] <= MAX_SPEED:
        raise CommandError(
            f"--speed {options['speed']:g}: give more than 0 and at most {MAX_SPEED:g} (timeouts are simulated "
            "seconds; faster, a 600 s timeout lasts under a real second)"
        )
    if not timedelta(minutes=10) <= duration <= timedelta(days=14):
        raise CommandError(f"--duration {options['duration']}: give 10m to 14d")
    if not 1 <= options["pooler_connections"] <= 100:
        raise CommandError(f"--pooler-connections {options['pooler_connections']}: give 1 to 100")
    if options["pooler_connections"] != pgbouncer.POOL_SIZE and not (options["pooler"] or options["compare"]):
        raise CommandError("--pooler-connections goes with --pooler or --compare")
    if options["skew"] < 0 or options["orders_per_minute"] < 0:
        raise CommandError("--skew and --orders-per-minute cannot be negative")
    if any(f.kind == FaultKind.KILL_SCHEDULER for f in faults) and options["servers"] < 2:
        raise CommandError("--kill-scheduler needs at least 2 servers (nothing would claim the ticks)")


def _latest_sunday_evening() -> datetime:
    """The latest Sunday 20:00 UTC at or before now: the window then holds the 20:30 payout tick."""
    now = clock.now().astimezone(UTC)
    sunday = now - timedelta(days=(now.weekday() + 1) % 7)
    start = sunday.replace(hour=20, minute=0, second=0, microsecond=0)
    return start if start <= now else start - timedelta(days=7)


def _process_problems(outcome: SimulationOutcome) -> list[str]:
    problems = [f"process {name} exited on its own" for name in outcome.crashed]
    if outcome.unsettled:
        problems.append(f"did not settle: {outcome.unsettled}")
    elif not outcome.drained:
        problems.append("runs still in flight after a minute in which none finished, once the schedulers stopped")
    return problems


def _plan_json(plan: SimulationPlan, outcome: SimulationOutcome, *, pooled: bool) -> dict[str, Any]:
    return {
        "plan": {
            "pooler": pooled,
            "servers": plan.servers,
            "workers": plan.workers,
            "start": plan.start.isoformat(),
            "duration_seconds": plan.duration.total_seconds(),
            "speed": plan.speed,
            "skew_seconds": plan.skew,
        },
        "faults": [record.line() for record in outcome.faults],
        "fault_stories": [record.story() for record in outcome.faults],
        "clock": _clock_json(plan, outcome),
        "unsettled": outcome.unsettled,
    }


def _clock_json(plan: SimulationPlan, outcome: SimulationOutcome) -> dict[str, Any]:
    if outcome.governor is None:
        return {"asked_speed": plan.speed}
    return outcome.governor.as_json(outcome.simulated_span(plan.start), ended=outcome.ended_real)


def render_text(
    report: SimulationReport, plan: SimulationPlan, outcome: SimulationOutcome, log_dir: Path, *, pooled: bool = False
) -> list[str]:
    lines = [
        "",
        f"Simulated {report.window_start:%Y-%m-%d %H:%M} to {report.window_end:%H:%M} UTC at {plan.speed:g}x: "
        f"{plan.servers} servers x {plan.workers} workers, scheduler clocks within +-{plan.skew:g} s"
        + (", every process behind PgBouncer (transaction mode)" if pooled else ""),
        *_fault_lines(outcome),
        *(
            [outcome.governor.line(outcome.simulated_span(plan.start), ended=outcome.ended_real)]
            if outcome.governor
            else []
        ),
        *([f"Did not settle: {outcome.unsettled}"] if outcome.unsettled else []),
        "",
        f"  {'job':<26}{'ticks':>7}{'ran':>6}  {'skipped (reason)':<30}{'missed':>7}",
        *(_job_line(ticks) for ticks in sorted(report.jobs, key=lambda t: t.job_name)),
        _job_line(report.delayed, label="cancel-stale-order (due)"),
        "",
        f"Duplicates: {report.duplicate_claims} claims, {report.duplicate_charges} probe charges "
        f"(over {report.charged_ticks} charged ticks), {report.payouts.duplicates} payouts",
        *_payout_lines(report),
        *_money_lines(report),
        *_order_lines(report),
        _lateness_line(report, plan, outcome),
        "Recovery: " + ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in report.recovery.items()),
        "",
    ]
    if report.ok:
        lines.append("Every invariant held: exit 0.")
    else:
        lines += ["INVARIANTS BROKEN:", *(f"  {problem}" for problem in report.problems), f"Logs: {log_dir}"]
    return lines


def _clock_lines(plan: SimulationPlan, outcome: SimulationOutcome) -> list[str]:
    if outcome.governor is None:
        return []
    return [outcome.governor.line(outcome.simulated_span(plan.start), ended=outcome.ended_real)]


def _fault_lines(outcome: SimulationOutcome) -> list[str]:
    lines = []
    for record in outcome.faults:
        lines.append(f"  fault: {record.line()}")
        if story := record.story():
            lines.append(f"    what became of it: {story}")
    return lines


def _job_line(ticks: JobTicks, *, label: str | None = None) -> str:
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(ticks.skipped.items())) or "-"
    missed = ticks.never_claimed + len(ticks.broken)
    pending = f" ({ticks.retry_pending} retry due after the window)" if ticks.retry_pending else ""
    return f"  {label or ticks.job_name:<26}{ticks.expected:>7}{ticks.succeeded:>6}  {skipped:<30}{missed:>7}{pending}"


def _payout_lines(report: SimulationReport) -> list[str]:
    payouts = report.payouts
    if payouts.as_of is None:
        return ["Payouts: no payout tick succeeded in the window"]
    return [
        f"Payouts as of {payouts.as_of:%Y-%m-%d %H:%M} UTC: {payouts.checked} checked against their orders, "
        f"{len(payouts.wrong_amounts)} wrong amounts, {payouts.unpaid_weeks} finished weeks unpaid; "
        f"ledger invariant (contiguous from onboarding, gross = delivered orders): "
        + ("held" if not payouts.ledger else f"{len(payouts.ledger)} problems")
    ]


def _money_lines(report: SimulationReport) -> list[str]:
    """The provider's transfers beside the ledger, per restaurant, and the statements."""
    transfers, statements = report.transfers, report.statements
    lines = []
    if transfers.checked:
        agree = all(row.agree for row in transfers.restaurants)
        lines += [
            f"Transfers at the provider (read through its API): {transfers.held} for "
            f"{transfers.paid_weeks} paid weeks; "
            f"{transfers.missing} paid weeks without one, {transfers.doubles} paid twice, "
            f"{len(transfers.wrong_amounts)} of another amount, {len(transfers.unknown)} unknown to the ledger",
            f"  {'restaurant':<28}{'payouts':>8}{'net':>14}{'transfers':>11}{'transferred':>14}  agree",
            *(
                f"  {row.name[:27]:<28}{row.payouts:>8}{row.net:>14}{row.transfers:>11}{row.transferred:>14}  "
                + ("yes" if row.agree else "NO")
                for row in transfers.restaurants
            ),
            "  The ledger and the provider agree for every restaurant."
            if agree
            else "  The ledger and the provider DISAGREE (see the rows marked NO).",
        ]
    if statements.checked:
        lines.append(
            f"Statements: {statements.delivered} of {statements.statements} found among the messages written "
            f"(by Message-ID), {statements.copies} extra copies, {len(statements.unsent)} never sent, "
            f"{statements.waiting_recipient} waiting for an address"
        )
    return lines


def _order_lines(report: SimulationReport) -> list[str]:
    orders = report.orders
    if not orders.statuses:
        return []
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(orders.statuses.items()))
    return [
        f"Orders placed during the run: {sum(orders.statuses.values())} ({statuses}); "
        f"{orders.accepted_and_cancelled} accepted and cancelled, {orders.cancelled_early} cancelled early, "
        f"{orders.overdue_unanswered} left past their deadline"
    ]


def _lateness_line(report: SimulationReport, plan: SimulationPlan, outcome: SimulationOutcome) -> str:
    late = report.lateness
    if not late:
        return "Lateness: no cron run started"
    # In real time at the clock's effective speed (the governor may have slowed it).
    effective = (
        outcome.governor.effective_speed(outcome.simulated_span(plan.start), ended=outcome.ended_real)
        if outcome.governor
        else 0.0
    )
    speed = effective or plan.speed  # a run stopped before its clock started has none
    real = f"{late['p99'] / speed * 1000:.0f} ms real at {speed:.0f}x"
    return (
        f"Lateness of {late['runs']:.0f} cron runs (start - tick, simulated): p50 {late['p50']:.1f} s, "
        f"p99 {late['p99']:.1f} s ({real}), max {late['max']:.1f} s"
    )
