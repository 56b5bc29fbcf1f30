"""Benchmark 3 under a backlog: an hour of cancellations scheduled up front, then the rush.

    make bench-backlog                                  # 1,000,000 runs; in .venv-peers
    .venv-peers/bin/python -m bench.peers.backlog --backlog 100000 [--rate 200]
        [--step-seconds 30] [--horizon 3600] [--peer-backlog 100000] [--only project --only celery]
    python -m bench.peers.backlog --only project --backlog 50000    # the project alone, in .venv

Per side, in a database of its own with one worker process that lives through both phases:

1. the rush alone: bench/cancellations.py's placers at ``--rate`` for ``--step-seconds``
   (the same seeds, the 70 % accepted, the 10 s timeout and the drain);
2. the backlog: ``--backlog`` placed orders (``--peer-backlog`` for procrastinate and
   Celery), each with its cancellation due at a moment spread evenly over the ``--horizon``
   seconds (an hour) from the second rush's start (a busy platform's next hour, scheduled
   before it starts), inserted in bulk, latest first: Tiffin's ``orders_order``,
   ``job_runs`` and their ``claimed`` events by INSERT ... SELECT generate_series, as
   ``order_place`` writes them; procrastinate's jobs through its own
   ``job_manager.batch_defer_jobs`` (each with its ``schedule_at``); Celery's tasks by
   ``apply_async(eta=...)``, one by one on one producer (it has no bulk send);
3. the same rush again, on top of the backlog (whose runs fall due meanwhile, about
   ``backlog / horizon`` a second).

Reported per side and phase: placed/s, the rush's lateness p50/p99/max, missed and executed
twice (bench/peers/cancellations.py's counts), the backlog's runs due by the end of the
drain (cancelled, missed, their p99), and the RSS of the worker (every process it started,
summed; and its largest process) at the phase's start, its peak and its end, sampled every
0.5 s, with Redis's used memory for Celery. The project's goals: the rush's p99 on top of
the backlog within 1.2x of the rush's alone, the worker's peak RSS within 1.2x, nothing
missed or executed twice. The peers' figures stand beside it without goals. The backlog
stays unanalysed (the server runs with autovacuum off: the statistics are the rush's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import cancellations as base
from bench.common import (
    PYTHON,
    Child,
    Report,
    Row,
    child_start,
    children,
    command_line,
    database_drop,
    fmt,
    percentile,
    sql_run,
)
from bench.peers import cancellations as peers
from support.processes import descendants

NAME = "cancellations_backlog"
MODULE = "bench.peers.backlog"
SIDES = peers.SIDES
LABELS = peers.LABELS
RATIO_GOAL = 1.2
CHUNK = 20_000  # backlog rows per INSERT (or per batch_defer_jobs call)
BACKLOG_TAG = "b"  # the backlog orders' customer_ref prefix (the rushes' are "alone" and "on")
# Seconds past the end of the backlog's insertion before the second rush starts, at least.
LEAD = 5.0

# The backlog's orders and their runs, one chunk: rows lo..hi-1 of n, row i due at
# base + (i + 0.5) * horizon / n, placed ``timeout`` before (the order's deadline is its
# run's due time, as order_place makes it). The runs and their events are what
# queries.CLAIM_RUN_WITH_SUBJECT writes for one order.
PROJECT_FILL = """
WITH placed AS (
    INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, cancel_reason)
    SELECT (SELECT min(id) FROM orders_restaurant) + i %% %(restaurants)s, %(tag)s || '-' || i, 'placed', 12.50,
           %(base)s + ((i + 0.5) * %(spacing)s - %(timeout)s) * interval '1 second', ''
    FROM generate_series(%(lo)s, %(hi)s - 1) AS i
    RETURNING id, placed_at
), claimed AS (
    INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, created_at,
                          attempts, worker, skip_reason, error, overlap)
    SELECT 'cancel-stale-order', 'order:' || id, placed_at + %(timeout)s * interval '1 second',
           placed_at + %(timeout)s * interval '1 second', 'scheduled', 'delayed', now(), 0, '', '', '', ''
    FROM placed
    RETURNING id, created_at
)
INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
SELECT id, created_at, 'claimed', 0, NULL, '', '' FROM claimed
"""
# The peers' backlog orders (their tasks are deferred or sent after, by their own API).
ORDERS_FILL = """
INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, cancel_reason)
SELECT (SELECT min(id) FROM orders_restaurant) + i %% %(restaurants)s, %(tag)s || '-' || i, 'placed', 12.50,
       %(base)s + ((i + 0.5) * %(spacing)s - %(timeout)s) * interval '1 second', ''
FROM generate_series(%(lo)s, %(hi)s - 1) AS i
RETURNING id, placed_at + %(timeout)s * interval '1 second'
"""


# --- Pure pieces (tests/unit/test_bench_backlog.py) ------------------------------------


def chunks_latest_first(n: int, size: int = CHUNK) -> list[tuple[int, int]]:
    """[lo, hi) row ranges of ``n`` rows in chunks of ``size``, the latest due first, so
    that a slow insertion leaves the earliest runs to the end, nearest their due time."""
    return [(lo, min(lo + size, n)) for lo in reversed(range(0, n, size))]


def due_offset(i: int, n: int, horizon: float) -> float:
    """Seconds after the backlog's start at which row ``i`` of ``n`` is due (evenly spread)."""
    return (i + 0.5) * horizon / n


def lead_seconds(mode: str, n: int) -> float:
    """A generous estimate of the backlog's insertion time on this machine, busy (the
    backlog starts falling due this long after its insertion starts and the second rush
    waits for it, so no backlog run is overdue when the rush starts; a million of the
    project's took 194 s at a load average of 13, so 8,000 a second was not generous)."""
    per_second = {"project": 4_000.0, "procrastinate": 2_000.0, "celery": 600.0}[mode]
    return n / per_second + 30.0


@dataclass
class Memory:
    """RSS of the worker's processes, sampled: the first, the largest and the last sample,
    each as (summed over its processes, its largest process), in bytes."""

    start: tuple[int, int] = (0, 0)
    peak: tuple[int, int] = (0, 0)
    end: tuple[int, int] = (0, 0)
    samples: int = 0

    def add(self, total: int, largest: int) -> None:
        if not self.samples:
            self.start = (total, largest)
        self.peak = (max(self.peak[0], total), max(self.peak[1], largest))
        self.end = (total, largest)
        self.samples += 1

    def mib(self) -> str:
        """``start / peak / end`` of the summed RSS in MiB."""
        return " / ".join(fmt(pair[0] / 2**20) for pair in (self.start, self.peak, self.end))


@dataclass
class Phase:
    """One phase's measurements on one side."""

    name: str  # "alone" or "on backlog"
    result: dict[str, Any]  # bench.cancellations.step's, with cpu, rss and twice added
    memory: Memory = field(default_factory=Memory)
    backlog: dict[str, Any] = field(default_factory=dict)  # the backlog's due runs, this phase
    redis_bytes: tuple[int, int] | None = None  # Redis used_memory at the phase's start and end


def rush_summary(phase: Phase) -> dict[str, Any]:
    s = peers.summary(phase.result)
    s["rss_start_mib"], s["rss_peak_mib"], s["rss_end_mib"] = (pair[0] / 2**20 for pair in (
        phase.memory.start, phase.memory.peak, phase.memory.end))  # fmt: skip
    s["largest_peak_mib"] = phase.memory.peak[1] / 2**20
    return s


def backlog_figures(late: list[float], missed: list[float], twice: int = 0) -> dict[str, Any]:
    """The backlog's runs due in a phase: how many cancelled, missed (still placed a drain
    after it ended), executed twice, and the p99 of their lateness (a lower bound if among the missed)."""
    values = sorted(late) + [math.inf] * len(missed)
    p99: float | str = percentile(values, 99) if values else math.nan
    if isinstance(p99, float) and math.isinf(p99):
        p99 = f"> {min(missed):.0f} (missed)"
    return {"due": len(values), "cancelled": len(late), "missed": len(missed), "twice": twice, "p99": p99}


def ratio(on_backlog: float | str, alone: float | str) -> float | None:
    """``on_backlog / alone`` of two figures, None if either is not a number (a missed p99)."""
    if not isinstance(on_backlog, int | float) or not isinstance(alone, int | float) or not alone:
        return None
    return float(on_backlog) / float(alone)


def phases_table(sides: dict[str, list[Phase]]) -> str:
    header = ["side", "phase", "placed /s", "p50 s", "p99 s", "max s", "missed", "twice", "RSS MiB start/peak/end",
              "largest MiB", "backlog due", "b. missed", "b. twice", "b. p99 s"]  # fmt: skip
    body = []
    for mode, phases in sides.items():
        for phase in phases:
            s, b = rush_summary(phase), phase.backlog
            body.append([LABELS[mode], phase.name, fmt(s["rate"]), fmt(s["p50"]), fmt(s["p99"]), fmt(s["max"]),
                         fmt(s["missed"]), fmt(s["twice"]), phase.memory.mib(), fmt(s["largest_peak_mib"]),
                         fmt(b.get("due")), fmt(b.get("missed")), fmt(b.get("twice")), fmt(b.get("p99"))])  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in [header, *body]]
    title = "per side and phase (b.: the backlog's runs due by the end of the rush's drain, seen a drain later):"
    return "\n".join([title, *lines])


# --- Filling the backlog (a child: python -m bench.peers.backlog --fill MODE URL N BASE HORIZON OUT) ---


def fill(mode: str, url: str, n: int, start: float, horizon: float, out: Path) -> None:
    """Insert the side's backlog; write what it took to ``out``."""
    began = time.time()
    moment = datetime.fromtimestamp(start, UTC)
    params = {"restaurants": base.RESTAURANTS, "tag": BACKLOG_TAG, "base": moment, "spacing": horizon / n,
              "timeout": base.TIMEOUT_SECONDS}  # fmt: skip
    if mode == "project":
        with psycopg.connect(url, autocommit=True) as conn:
            for lo, hi in chunks_latest_first(n):
                conn.execute(PROJECT_FILL, {**params, "lo": lo, "hi": hi})
    else:
        deferred = _fill_peer(mode, url, n, params)
        assert deferred == n, f"{deferred} of {n} deferred"
    out.write_text(json.dumps({"seconds": time.time() - began, "finished_at": time.time()}))


def _fill_peer(mode: str, url: str, n: int, params: dict[str, Any]) -> int:
    sent = 0
    if mode == "procrastinate":
        from bench.common import django_setup

        django_setup(url, DJANGO_SETTINGS_MODULE=peers.SETTINGS[mode])
        from procrastinate.contrib.django import app

        from bench.peers.tasks import procrastinate_cancel_order

        for lo, hi in chunks_latest_first(n):
            rows = _orders_inserted(url, {**params, "lo": lo, "hi": hi})
            jobs = [procrastinate_cancel_order.configure(schedule_at=due).make_new_job(order_id=order_id)
                    for order_id, due in rows]  # fmt: skip
            sent += len(app.job_manager.batch_defer_jobs(jobs=jobs))
        return sent
    from bench.peers.celery_app import app as celery_app
    from bench.peers.celery_app import celery_cancel_order

    with celery_app.producer_or_acquire() as producer:
        for lo, hi in chunks_latest_first(n):
            for order_id, due in _orders_inserted(url, {**params, "lo": lo, "hi": hi}):
                celery_cancel_order.apply_async((order_id,), eta=due, producer=producer)
                sent += 1
    return sent


def _orders_inserted(url: str, params: dict[str, Any]) -> list[tuple[int, datetime]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [(int(row[0]), row[1]) for row in conn.execute(ORDERS_FILL, params)]


# --- Memory ----------------------------------------------------------------------------


def rss_pair(pid: int) -> tuple[int, int]:
    """(RSS of ``pid`` and every descendant summed, the largest of them) in bytes."""
    sizes = []
    for each in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{each}/statm").read_text().split()
        except OSError:
            continue
        sizes.append(int(fields[1]) * os.sysconf("SC_PAGE_SIZE"))
    return (sum(sizes), max(sizes, default=0))


class Sampler:
    """Samples the worker's RSS into ``memory`` every 0.5 s while in the ``with`` block."""

    def __init__(self, worker: Child, memory: Memory) -> None:
        self.worker, self.memory, self._stop = worker, memory, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self.memory.add(*rss_pair(self.worker.popen.pid))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.memory.add(*rss_pair(self.worker.popen.pid))

    def _run(self) -> None:
        while not self._stop.wait(peers.RSS_SAMPLE_SECONDS):
            self.memory.add(*rss_pair(self.worker.popen.pid))


def redis_used() -> int:
    import redis

    from bench.peers.celery_app import REDIS_URL

    return int(redis.Redis.from_url(REDIS_URL).info("memory")["used_memory"])


# --- One side ---------------------------------------------------------------------------


def side(mode: str, args: argparse.Namespace) -> list[Phase]:
    url, env = peers.side_prepare(mode, NAME)
    n = args.backlog if mode == "project" else args.peer_backlog
    phases: list[Phase] = []
    try:
        with children(f"{NAME}-{mode}") as (started, logs):
            worker = child_start("worker", peers.worker_command(mode, args), env=env, logs=logs)
            started.append(worker)
            peers.wait_ready(mode, url, worker)
            phases.append(_rush(mode, args, "alone", url, worker, env, started, logs, start_at=time.time() + 3.0))
            print(f"{LABELS[mode]} alone: {_line(phases[-1])}", flush=True)
            phases.append(_on_backlog(mode, args, n, url, worker, env, started, logs))
            print(f"{LABELS[mode]} on a backlog of {n:,}: {_line(phases[-1])}", flush=True)
    finally:
        if mode == "celery":
            peers.redis_flush()
        if not args.keep:
            database_drop(f"{NAME}_{mode}")
    return phases


def _rush(
    mode: str, args: argparse.Namespace, name: str, url: str, worker: Child, env: dict[str, str],
    started: list[Child], logs: Path, *, start_at: float, memory: Memory | None = None,
) -> Phase:  # fmt: skip
    tag = "alone" if name == "alone" else "on"
    phase = Phase(name=name, result={}, memory=memory or Memory())
    cpu = worker.cpu_seconds()
    with Sampler(worker, phase.memory):
        result = base.step(mode, args, args.rate, tag, urls=(url, url), env=env, started=started, logs=logs,
                           module=peers.MODULE, start_at=start_at)  # fmt: skip
    result["cpu"] = worker.cpu_seconds() - cpu
    result["rss"] = phase.memory.peak[0]
    result["twice"] = executed_twice(mode, url, tag)
    result["kill"] = False
    phase.result = result
    return phase


def _on_backlog(
    mode: str, args: argparse.Namespace, n: int, url: str, worker: Child, env: dict[str, str],
    started: list[Child], logs: Path,
) -> Phase:  # fmt: skip
    """Insert the backlog (the worker's memory sampled from before it), then the rush on top."""
    memory = Memory()
    redis_before = redis_used() if mode == "celery" else None
    start_at = time.time() + (args.lead if args.lead is not None else lead_seconds(mode, n))
    due_from = start_at + args.backlog_from
    out = logs / "fill.json"
    with Sampler(worker, memory):
        command = [PYTHON, "-m", MODULE, "--fill", mode, url, str(n), repr(due_from), repr(args.horizon), str(out)]
        filler = child_start("fill", command, env=env, logs=logs)
        started.append(filler)
        if filler.popen.wait() != 0:
            raise SystemExit(f"the backlog's insertion failed:\n{filler.tail()}")
        filled = json.loads(out.read_text())
    print(f"{LABELS[mode]}: {n:,} backlog runs inserted in {filled['seconds']:.0f} s", flush=True)
    if args.analyze:
        sql_run(url, "ANALYZE")  # statistics that see the backlog, as autovacuum's would
    # The rush starts when the backlog starts falling due (or at once, if its insertion overran);
    # the phase's CPU is counted from 3 s before it, as the first phase's, not over the wait.
    start_at = max(start_at, time.time() + LEAD)
    base._sleep_until(start_at - 3.0)
    phase = _rush(mode, args, "on backlog", url, worker, env, started, logs, start_at=start_at, memory=memory)
    phase.result["fill_seconds"] = filled["seconds"]
    phase.result["overdue_at_start"] = max(start_at - due_from, 0.0)
    phase.backlog = _backlog_outcome(mode, url, phase.result["drained_at"], args.drain)
    if redis_before is not None:
        phase.redis_bytes = (redis_before, redis_used())
    return phase


def _backlog_outcome(mode: str, url: str, until: float, drain: float) -> dict[str, Any]:
    """The backlog's runs due by ``until`` (the rush's drain ended), looked at ``drain``
    seconds later, as the rush's own are: lateness of the cancelled, how long the rest waited."""
    base._sleep_until(until + drain)
    seen = time.time()
    deadline = f"placed_at + interval '{base.TIMEOUT_SECONDS} seconds'"
    mine = f"customer_ref LIKE '{BACKLOG_TAG}-%%' AND {deadline} <= to_timestamp(%s)"
    with psycopg.connect(url, autocommit=True) as conn:
        late = [float(r[0]) for r in conn.execute(
            f"SELECT extract(epoch FROM cancelled_at - ({deadline})) FROM orders_order "
            f"WHERE status = 'cancelled' AND {mine}", [until])]  # fmt: skip
        missed = [float(r[0]) for r in conn.execute(
            f"SELECT %s - extract(epoch FROM {deadline}) FROM orders_order WHERE status = 'placed' AND {mine}",
            [seen, until])]  # fmt: skip
    return backlog_figures(late, missed, executed_twice(mode, url, BACKLOG_TAG))


def executed_twice(mode: str, url: str, tag: str) -> int:
    """Orders of ``tag`` whose cancellation started more than once. Driven from the starts
    (thousands) and probing the orders by key: bench.peers.cancellations.executed_twice's
    join from the orders, planned on unanalysed tables, scanned the orders once per start
    and ran for minutes beside a backlog of 100,000."""
    if mode == "project":
        query = f"""SELECT count(*) FROM (
            SELECT e.run_id FROM job_run_events e JOIN job_runs r ON r.id = e.run_id
            JOIN orders_order o ON o.id = substr(r.subject, 7)::bigint
            WHERE e.kind = 'started' AND r.job_name = 'cancel-stale-order' AND o.customer_ref LIKE '{tag}-%%'
            GROUP BY e.run_id HAVING count(*) > 1) twice"""
    else:
        query = f"""SELECT count(*) FROM (
            SELECT s.order_id FROM bench_peer_starts s JOIN orders_order o ON o.id = s.order_id
            WHERE o.customer_ref LIKE '{tag}-%%' GROUP BY s.order_id HAVING count(*) > 1) twice"""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def _line(phase: Phase) -> str:
    b = phase.backlog
    text = f"{peers._line(phase.result)}, RSS start/peak/end {phase.memory.mib()} MiB"
    if b:
        text += f"; backlog due {b['due']:,}, missed {b['missed']:,}, twice {b['twice']}, p99 {fmt(b['p99'])} s"
    return text


# --- The report -------------------------------------------------------------------------


def report(args: argparse.Namespace, sides: dict[str, list[Phase]]) -> Report:
    rep = Report(
        name=NAME,
        title=(
            f"3b. order cancellation under a backlog: {args.backlog:,} runs due over {args.horizon:g} s "
            f"(peers {args.peer_backlog:,}), then {fmt(args.rate)} orders/s for {args.step_seconds:g} s, "
            "beside the same rush alone"
        ),
        command=command_line("bench.peers.backlog"),
        project="Tiffin: order_place + delayed cancel-stale-order runs, manage.py worker",
        reference="the same rush without the backlog, same worker process, same run",
        partial=vars(args) != vars(arguments(argument_parser(), [])),
    )
    for mode, phases in sides.items():
        if len(phases) < 2:
            continue
        alone, on = (rush_summary(p) for p in phases)
        project = mode == "project"
        p99 = ratio(on["p99"], alone["p99"])
        rss = ratio(on["rss_peak_mib"], alone["rss_peak_mib"])
        rep.add(
            Row(f"{LABELS[mode]}: rush p99 on the backlog / alone", "s", on["p99"], alone["p99"], "lower",
                f"<= {RATIO_GOAL}x" if project else "", (p99 is not None and p99 <= RATIO_GOAL) if project else None,
                ratio=p99),
            Row(f"{LABELS[mode]}: worker peak RSS on the backlog / alone", "MiB", on["rss_peak_mib"],
                alone["rss_peak_mib"], "lower", f"<= {RATIO_GOAL}x" if project else "",
                (rss is not None and rss <= RATIO_GOAL) if project else None, ratio=rss),
        )  # fmt: skip
        b = phases[1].backlog
        lost = on["missed"] + alone["missed"] + b["missed"]
        twice = on["twice"] + alone["twice"] + b["twice"]
        rep.add(Row(f"{LABELS[mode]}: missed / executed twice, rushes and backlog due", "orders",
                    f"{lost} / {twice}", None, None, "0 and 0" if project else "",
                    (not lost and not twice) if project else None))  # fmt: skip
    rep.tables.append(phases_table(sides))
    for mode, phases in sides.items():
        if len(phases) > 1:
            on_phase = phases[1]
            rep.note(f"{LABELS[mode]}: backlog inserted in {fmt(on_phase.result['fill_seconds'])} s, "
                     f"overdue at the rush's start by {fmt(on_phase.result['overdue_at_start'])} s")  # fmt: skip
            if on_phase.redis_bytes:
                before, after = (value / 2**20 for value in on_phase.redis_bytes)
                rep.note(f"Redis used memory (the whole server) {fmt(before)} MiB before the backlog, "
                         f"{fmt(after)} MiB at the end")  # fmt: skip
    rep.note(f"the backlog falls due evenly over {args.horizon:g} s from {args.backlog_from:g} s after the second "
             f"rush's start; each rush had until {args.drain:g} s after its last deadline (then missed)")  # fmt: skip
    rep.note("RSS: the worker process and every process it started, summed (shared pages in each); largest: "
             "its largest process; start and end of the second phase bracket the backlog's insertion")  # fmt: skip
    rep.note(
        (
            "the database is analysed after the backlog's insertion"
            if args.analyze
            else "the backlog's rows are not analysed (autovacuum is off on this server)"
        )
        + "; the worker lives through both phases"
    )
    rep.note("measured on a shared 2-core machine: placers, workers, PostgreSQL and Redis compete for the CPUs")
    return rep


def main() -> int:
    parser = argument_parser()
    args = arguments(parser)
    if args.fill:
        mode, url, n, start, horizon, out = args.fill
        fill(mode, url, int(n), float(start), float(horizon), Path(out))
        return 0
    sides = args.only or ["project"]
    if "project" not in sides:
        parser.error("--only must include project (every peer's figures stand beside the project's)")
    return report(args, {mode: side(mode, args) for mode in SIDES if mode in sides}).finish()


def argument_parser() -> argparse.ArgumentParser:
    parser = peers.argument_parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--backlog", type=int, default=100_000, help="the project's backlog of runs")
    parser.add_argument("--peer-backlog", type=int, default=100_000, help="procrastinate's and Celery's backlog")
    parser.add_argument("--horizon", type=float, default=3600.0, help="seconds the backlog falls due over")
    parser.add_argument("--backlog-from", type=float, default=0.0,
                        help="seconds after the second rush's start when the backlog starts falling due")  # fmt: skip
    # The placers' --rate (bench.peers.cancellations's, hidden there) is the rush's rate here.
    for action in parser._actions:
        if action.dest == "rate":
            action.default, action.help = 200.0, "the rush's orders per second"
    parser.set_defaults(step_seconds=30.0)  # the rush's length (make bench's peers run steps 20 s)
    parser.add_argument("--lead", type=float, help="seconds from the insertion's start to the backlog's first due")
    parser.add_argument("--analyze", action="store_true", help="ANALYZE the side's database after the insertion")
    parser.add_argument("--keep", action="store_true", help="keep the databases (dropped by default: gigabytes)")
    parser.add_argument("--fill", nargs=6, help=argparse.SUPPRESS)
    return parser


def arguments(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    return base.arguments(parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
