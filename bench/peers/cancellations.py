"""Benchmark 3 beside the tools a Django team would pick instead: Tiffin, procrastinate and
Celery cancel the same stale orders, with the same placers, rates and seeds, in one run.

    make bench                             # runs this too (bench/__main__.py), in .venv-peers
    make bench-peers                       # this alone, with make bench's arguments
    .venv-peers/bin/python -m bench.peers.cancellations [--rates 200,400] [--step-seconds 30]
        [--only project --only celery] [--kill] [--kill-rate 400]

The steps: 25, 50 and 100 orders/s, then benchmark 3's (200, 400, 700, 1,000, 1,200, 1,400,
1,700 and 2,000), 20 s each. Each side steps up until a step fails, the first that does not
hold (p99 lateness 1 s or more, an order missed, cancelled wrongly or run twice) or in which
a placer failed; the rate before it is the side's peak.

The placers, the acceptance of ~70 % of the orders, the 10 s timeout, the drain and the
lateness, missed and wrong counts are bench/cancellations.py's (read its docstring). The
sides, each in a database of its own with one worker process:

- project: ``order_place`` with its delayed ``cancel-stale-order`` run, ``manage.py worker``.
- procrastinate 3 through its Django integration: the order and
  ``configure(schedule_at=deadline).defer(order_id=...)`` in one transaction (the Django
  connector defers on Django's connection); one ``manage.py procrastinate worker``.
- Celery 5 on Redis: the order created, then on commit
  ``apply_async((order_id,), countdown=10)``; one ``celery worker`` with the prefork pool.

Both peers' tasks record their start, then run the project's own conditional cancel
(bench/peers/record.py). Per step: placed/s achieved, lateness p50/p99/max, missed,
executed twice (an order whose task started more than once; for the project a run with
more than one ``started`` event), worker CPU per 1,000 orders (the worker and all its
children), and worker RSS (the largest sum over the worker's processes, sampled every
0.5 s). ``--kill``: after the steps, one more step, on a fresh database (and an emptied
Redis) so that no backlog of a missed step is counted in it, in which the worker's whole
process group is SIGKILLed halfway through the placing and started again at once. It runs
at the side's peak, the highest rate it held (its lowest if it held none), unless
``--kill-rate`` names one rate for every side.

Goals: the project's ceiling at least each peer's in the same run; killed, the project
misses nothing and runs nothing twice (the peers' counts are reported); nothing cancelled
wrongly on any side.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import cancellations as base
from bench.common import (
    PYTHON,
    Child,
    Report,
    Row,
    child_env,
    child_start,
    children,
    command_line,
    database_create,
    fmt,
    manage,
    official_run,
    sql_run,
)
from bench.peers.record import CELERY_DB_REUSE_MAX, STARTS_TABLE
from support.processes import descendants, signal_group

NAME = "cancellations_peers"
MODULE = "bench.peers.cancellations"
SIDES = ("project", "procrastinate", "celery")
PEERS = ("procrastinate", "celery")
LABELS = {"project": "Tiffin", "procrastinate": "procrastinate", "celery": "Celery"}
SETTINGS = {"project": "tiffin.settings", "procrastinate": "bench.peers.settings", "celery": "tiffin.settings"}
HOW = {"procrastinate": "schedule_at in the order's transaction", "celery": "countdown on commit, Redis"}
# make bench's rates and steps (bench/__main__.py passes none): the peers fall behind at
# 50-400/s, so the steps start at 25; above 100 they are benchmark 3's, to its 2,000/s, so
# that the project fails a step too (it held 400/s with p99 0.35 s) and its kill step runs
# at its real peak. Every side stops after its first failed step (stepping_ends); 20 s
# steps keep the run to 14-15 minutes (docs/benchmark-peers.md).
RATES = (25.0, 50.0, 100.0, *base.RATES)
STEP_SECONDS = 20.0
RSS_SAMPLE_SECONDS = 0.5


# --- Placing: the order and its cancellation, in the placer processes ---------------------


def _place_procrastinate(restaurant: Any, customer_ref: str) -> tuple[int, Any]:
    from decimal import Decimal

    from django.db import transaction

    from bench.peers.tasks import procrastinate_cancel_order
    from orders.models import Order
    from tiffin import clock

    now = clock.now()
    with transaction.atomic():
        order = Order.objects.create(
            restaurant=restaurant, customer_ref=customer_ref, total=Decimal("12.50"), placed_at=now
        )
        procrastinate_cancel_order.configure(schedule_at=now + base.TIMEOUT).defer(order_id=order.pk)
    return int(order.pk), now + base.TIMEOUT


def _place_celery(restaurant: Any, customer_ref: str) -> tuple[int, Any]:
    from decimal import Decimal

    from django.db import transaction

    from bench.peers.celery_app import celery_cancel_order
    from orders.models import Order
    from tiffin import clock

    now = clock.now()
    with transaction.atomic():
        order = Order.objects.create(
            restaurant=restaurant, customer_ref=customer_ref, total=Decimal("12.50"), placed_at=now
        )
        order_id = int(order.pk)
        transaction.on_commit(lambda: celery_cancel_order.apply_async((order_id,), countdown=base.TIMEOUT_SECONDS))
    return order_id, now + base.TIMEOUT


PLACE = {"procrastinate": _place_procrastinate, "celery": _place_celery}


# --- The workers ------------------------------------------------------------------------


def worker_command(mode: str, args: argparse.Namespace) -> list[str]:
    if mode == "project":
        return [PYTHON, "manage.py", "worker"]
    if mode == "procrastinate":
        return [PYTHON, "manage.py", "procrastinate", "worker", "--concurrency", str(args.procrastinate_concurrency),
                "--fetch-job-polling-interval", str(args.procrastinate_polling)]  # fmt: skip
    return [PYTHON, "-m", "celery", "-A", "bench.peers.celery_app", "worker", "--pool", "prefork",
            "--concurrency", str(args.celery_concurrency), "--loglevel", "WARNING", "--without-gossip",
            "--without-mingle", "--without-heartbeat"]  # fmt: skip


def wait_ready(mode: str, url: str, worker: Child) -> None:
    """Until the worker shows it is up: the project's scheduler node, procrastinate's worker
    row, an answer from the Celery worker to a ping."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if worker.popen.poll() is not None:
            raise SystemExit(f"the {mode} worker exited:\n{worker.tail()}")
        if mode == "celery":
            from bench.peers.celery_app import app

            if app.control.ping(timeout=1.0):
                return
            continue
        table = "job_scheduler_nodes" if mode == "project" else "procrastinate_workers"
        if base._scalar(url, f"SELECT count(*) FROM {table}"):
            return
        time.sleep(0.2)
    raise SystemExit(f"the {mode} worker did not come up in 90 s:\n{worker.tail()}")


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (shared pages counted once per process)."""
    total = 0
    for each in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{each}/statm").read_text().split()
        except OSError:
            continue
        total += int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


class RssSampler:
    """The largest RSS of the worker (``holder[0]``, which a restart replaces) while running."""

    def __init__(self, holder: list[Child]) -> None:
        self.holder, self.peak, self._stop = holder, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.holder[0].popen.pid))
            self._stop.wait(RSS_SAMPLE_SECONDS)


# --- One side ---------------------------------------------------------------------------


def side_prepare(mode: str, name: str) -> tuple[str, dict[str, str]]:
    """A fresh database ``{name}_{mode}`` with the restaurants and the starts table, the
    peer's own tables (procrastinate) or an empty Redis (Celery); its URL and the worker's
    and placers' environment."""
    url = database_create(f"{name}_{mode}")
    sql_run(
        url,
        "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "SELECT 'Bench restaurant ' || i, 'Asia/Kolkata', 0.15, now(), true FROM generate_series(1, %s) AS i",
        [base.RESTAURANTS],
    )
    sql_run(url, STARTS_TABLE)
    if mode == "procrastinate":
        manage("migrate", "--noinput", "--verbosity", "0", "--skip-checks", url=url,
               DJANGO_SETTINGS_MODULE=SETTINGS[mode])  # fmt: skip
    if mode == "celery":
        redis_flush()
    env = child_env(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(base.TIMEOUT_SECONDS), DATABASE_CONN_MAX_AGE="60",
                    DJANGO_SETTINGS_MODULE=SETTINGS[mode])  # fmt: skip
    return url, env


def redis_flush() -> None:
    import redis

    from bench.peers.celery_app import REDIS_URL

    redis.Redis.from_url(REDIS_URL).flushdb()


def side(mode: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Step the rate up on one side (stopping after its first failed step, ``stepping_ends``),
    then the kill step on a fresh database at the side's peak (``kill_rate``)."""
    results = side_steps(mode, args, [(rate, f"s{n}", False) for n, rate in enumerate(args.rates)], NAME)
    if args.kill:
        rate = args.kill_rate or kill_rate(results, args.rates)
        results += side_steps(mode, args, [(rate, "kill", True)], f"{NAME}_kill")
    return results


def kill_rate(results: list[dict[str, Any]], rates: tuple[float, ...]) -> float:
    """The side's peak: the rate asked of the highest step it held, else the lowest rate."""
    held = [r["rate"] for r in results if summary(r)["held"] and not r["kill"]]
    return max(held, default=min(rates))


def stepping_ends(result: dict[str, Any]) -> bool:
    """Whether a side stops stepping after this step: it did not hold (p99 >= 1 s, an order
    missed, cancelled wrongly or run twice) or a placer failed. A higher rate would measure
    the backlog of this one, or a side already past its peak."""
    return not summary(result)["held"] or bool(result["errors_count"])


def held_to_the_top(results: list[dict[str, Any]], rates: tuple[float, ...]) -> bool:
    """Whether the side held every step up to the last of ``rates``: its ceiling is then a
    lower bound (the steps ended before it failed one)."""
    steps = [r for r in results if not r["kill"]]
    return bool(steps) and steps[-1]["rate"] == max(rates) and not stepping_ends(steps[-1])


def side_steps(
    mode: str, args: argparse.Namespace, plan: list[tuple[float, str, bool]], name: str
) -> list[dict[str, Any]]:
    """A fresh database and worker for ``mode``, then each (rate, tag, kill) of ``plan``
    until a step fails (``stepping_ends``)."""
    url, env = side_prepare(mode, name)
    results: list[dict[str, Any]] = []
    with children(f"{name}-{mode}") as (started, logs):
        holder = [child_start("worker", worker_command(mode, args), env=env, logs=logs)]
        started.append(holder[0])
        wait_ready(mode, url, holder[0])
        for rate, tag, kill in plan:
            if results and stepping_ends(results[-1]):
                break
            cpu_before = holder[0].cpu_seconds()
            start_at = time.time() + 3.0
            killer = None
            if kill:
                killer = threading.Timer(
                    start_at + args.step_seconds / 2 - time.time(),
                    _kill_and_restart, (mode, args, holder, started, env, logs))  # fmt: skip
                killer.start()
            with RssSampler(holder) as rss:
                result = base.step(mode, args, rate, tag, urls=(url, url), env=env, started=started, logs=logs,
                                   module=MODULE, start_at=start_at)  # fmt: skip
            if killer is not None:
                killer.join()
            result["cpu"] = holder[0].cpu_seconds() - (0.0 if kill else cpu_before)
            result["rss"] = rss.peak
            result["twice"] = executed_twice(mode, url, tag)
            result["kill"] = kill
            results.append(result)
            print(f"{LABELS[mode]} at {rate:g}/s{' (killed)' if kill else ''}: {_line(result)}", flush=True)
    return results


def _kill_and_restart(
    mode: str, args: argparse.Namespace, holder: list[Child], started: list[Child], env: dict[str, str], logs: Path
) -> None:
    """SIGKILL the worker's whole process group (a server lost), wait for it, start another."""
    old = holder[0]
    signal_group(old.popen.pid, signal.SIGKILL)
    old.popen.wait()
    old.stop()  # the group is gone: this only reaps and unregisters it
    started.remove(old)
    holder[0] = child_start("worker-restarted", worker_command(mode, args), env=env, logs=logs)
    started.append(holder[0])


def executed_twice(mode: str, url: str, tag: str) -> int:
    """Orders of the step whose cancellation started more than once."""
    mine = f"o.customer_ref LIKE '{tag}-%%'"
    if mode == "project":
        query = f"""SELECT count(*) FROM (
            SELECT r.id FROM orders_order o JOIN job_runs r ON r.subject = 'order:' || o.id
            JOIN job_run_events e ON e.run_id = r.id AND e.kind = 'started'
            WHERE r.job_name = 'cancel-stale-order' AND {mine} GROUP BY r.id HAVING count(*) > 1) twice"""
    else:
        query = f"""SELECT count(*) FROM (
            SELECT o.id FROM orders_order o JOIN bench_peer_starts s ON s.order_id = o.id
            WHERE {mine} GROUP BY o.id HAVING count(*) > 1) twice"""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


# --- The report -------------------------------------------------------------------------


def summary(result: dict[str, Any]) -> dict[str, Any]:
    s = base.summary(result)
    s["twice"] = result["twice"]
    s["rss_mib"] = result["rss"] / 2**20
    s["kill"] = result["kill"]
    s["held"] = s["held"] and not s["twice"]
    return s


def _line(result: dict[str, Any]) -> str:
    s = summary(result)
    return f"{base._line(s)}, twice {s['twice']}, RSS {fmt(s['rss_mib'])} MiB"


def ceiling(results: list[dict[str, Any]]) -> float:
    """The highest rate achieved at a step (not the kill step) with p99 < 1 s, nothing missed,
    nothing wrong and nothing executed twice."""
    return max((s["rate"] for s in map(summary, results) if s["held"] and not s["kill"]), default=0.0)


def steps_table(results: dict[str, list[dict[str, Any]]]) -> str:
    header = ["rate /s", "side", "placed /s", "p50 s", "p99 s", "max s", "missed", "twice", "wrong",
              "CPU s/1k", "RSS MiB", "held", "vs Tiffin"]  # fmt: skip
    body = []
    keys = sorted({(r["kill"], r["rate"]) for runs in results.values() for r in runs})
    for kill, rate in keys:
        mine = [summary(r) for r in results.get("project", []) if r["rate"] == rate and r["kill"] == kill]
        for mode, runs in results.items():
            for s in (summary(r) for r in runs if r["rate"] == rate and r["kill"] == kill):
                # The peer's p99 over Tiffin's: above 1, the peer is later.
                versus = "-"
                if mode != "project" and mine and isinstance(s["p99"], float) and isinstance(mine[0]["p99"], float):
                    versus = f"p99 {fmt(s['p99'] / mine[0]['p99'])} x"
                body.append([fmt(rate) + (" kill" if kill else ""), LABELS[mode], fmt(s["rate"]), fmt(s["p50"]),
                             fmt(s["p99"]), fmt(s["max"]), fmt(s["missed"]), fmt(s["twice"]), fmt(s["wrong"]),
                             fmt(s["cpu_per_1000"]), fmt(s["rss_mib"]), "yes" if s["held"] else "no",
                             versus])  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in [header, *body]]
    return "\n".join(["per step (kill: the worker SIGKILLed halfway through the placing, restarted at once):", *lines])


def goal_rows(results: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """The goals: the project's ceiling against each peer's (at least as high), and killed
    at its peak, the project with nothing missed and nothing run twice; each peer's counts
    of the kill step beside it, reported."""
    mine = ceiling(results["project"])
    rows = [
        Row(f"ceiling beside {LABELS[peer]} (p99 < 1 s, none missed or twice)", "/s", mine,
            ceiling(results[peer]), "higher", ">= the peer's", mine >= ceiling(results[peer]))
        for peer in PEERS if peer in results
    ]  # fmt: skip
    for mode, runs in results.items():
        for k in (summary(r) for r in runs if r["kill"]):
            goal, passed = ("0 and 0", not k["missed"] and not k["twice"]) if mode == "project" else ("", None)
            rows.append(Row(f"worker killed at {fmt(k['target'])}/s: missed / executed twice, {LABELS[mode]}",
                            "orders", f"{k['missed']} / {k['twice']}", None, None, goal, passed))  # fmt: skip
    wrong = sum(summary(r)["wrong"] for runs in results.values() for r in runs)
    rows.append(Row("wrongly cancelled (early or accepted), every side and step", "orders", wrong, None, None, "0",
                    wrong == 0))  # fmt: skip
    return rows


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> Report:
    kill = " and with the worker SIGKILLed at each side's peak" if args.kill else ""
    rep = Report(
        name=NAME,
        title=(
            f"3p. order cancellation beside procrastinate and Celery: {', '.join(fmt(r) for r in args.rates)} "
            f"orders/s, {args.step_seconds:g} s each, timeout {base.TIMEOUT_SECONDS} s, one worker process "
            f"each{kill}"
        ),
        command=command_line("bench.peers.cancellations"),
        project="Tiffin: order_place + delayed cancel-stale-order runs, manage.py worker",
        reference=", ".join(f"{LABELS[p]} ({HOW[p]})" for p in PEERS if p in results),
        partial=not official_run("peers.cancellations", args, lambda argv: base.arguments(argument_parser(), argv)),
    )
    rep.add(*goal_rows(results))
    rep.tables.append(steps_table(results))
    rep.data = {
        "steps": {mode: [{**base.step_figures(r, summary(r)), "twice": r["twice"], "kill": r["kill"]} for r in runs]
                  for mode, runs in results.items()},
    }  # fmt: skip
    rep.note(f"each step had until {args.drain:g} s after its last deadline; what was not cancelled then is missed")
    rep.note("a side stops after its first failed step (p99 >= 1 s, missed, wrong, twice or a placer error); "
             "the kill step runs on a fresh database (no backlog in it)")  # fmt: skip
    for mode, runs in results.items():
        if held_to_the_top(runs, args.rates):
            rep.note(f"{LABELS[mode]} held every step to {fmt(max(args.rates))}/s: its ceiling is a lower bound")
    rep.note(f"procrastinate: --concurrency {args.procrastinate_concurrency}, --fetch-job-polling-interval "
             f"{args.procrastinate_polling:g}; Celery: prefork, --concurrency {args.celery_concurrency}, "
             "early acknowledgement, Redis visibility timeout 1 h (its defaults), database connection kept "
             f"for {CELERY_DB_REUSE_MAX} tasks (CELERY_DB_REUSE_MAX)")  # fmt: skip
    rep.note("worker CPU and RSS: the worker process and all its children (RSS summed, shared pages in each)")
    rep.note("measured on a shared 2-core machine: placers, workers, PostgreSQL and Redis compete for the CPUs")
    return rep


def main() -> int:
    parser = argument_parser()
    args = base.arguments(parser)
    if args.placer:
        url, mode, out, start_at, tag = args.placer
        base.placer(url, mode, Path(out), float(start_at), args.rate, args.step_seconds, args.seed, tag,
                    place=PLACE.get(mode), settings_module=SETTINGS[mode])  # fmt: skip
        return 0
    sides = args.only or list(SIDES)
    if "project" not in sides:
        parser.error("--only must include project (every peer's figures stand beside the project's)")
    return report(args, {mode: side(mode, args) for mode in SIDES if mode in sides}).finish()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=base._rates, default=RATES, help="orders per second per step")
    parser.add_argument("--step-seconds", type=float, default=STEP_SECONDS, help="seconds of placing per step")
    parser.add_argument("--quick", action="store_true", help="10 s steps (for development)")
    parser.add_argument("--drain", type=float, default=20.0, help="seconds after a step's last deadline to finish")
    parser.add_argument("--only", choices=SIDES, action="append", help="run these sides only (repeatable)")
    parser.add_argument("--kill", action="store_true", help="then a step with the worker SIGKILLed and restarted")
    parser.add_argument(
        "--kill-rate", type=float, default=0.0, help="orders/s of every side's kill step (default: each side's peak)"
    )
    parser.add_argument("--procrastinate-concurrency", type=int, default=2, help="jobs the worker runs at once")
    parser.add_argument(
        "--procrastinate-polling",
        type=float,
        default=1.0,
        help="seconds between polls for due jobs (procrastinate's default is 5; the project's loop 1)",
    )
    parser.add_argument("--celery-concurrency", type=int, default=2, help="prefork pool processes")
    parser.add_argument("--placer", nargs=5, metavar=("URL", "MODE", "OUT", "START_AT", "TAG"), help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
