"""What a synchronous standby costs: commit latency and the cancellation benchmark's
ceiling, with the standby synchronous against the same standby asynchronous, in one run
(docs/failover.md, "The settings that matter, and what they cost").

One throwaway primary and its streaming standby (``tests/scenarios/cluster.py``,
``replicated_pair``: processes of their own on free ports in temporary directories,
never the machine's server), both with ``fsync`` and ``full_page_writes`` on, as in
production (the scenarios' clusters run with them off):

1. **Commit latency.** One process commits single-row INSERTs (bare psycopg) and one-tick
   claims (``scheduling.dispatch.runs_claim`` in a transaction of its own, as a scheduler
   pass claims a due tick: the ``job_runs`` row, the django-q2 task and the event),
   ``--commits`` of each per mode, in ``--blocks`` blocks: in each block the standby is
   made asynchronous (``synchronous_standby_names`` empty), then synchronous (``'*'``), or
   the other way round every other block, so a busy spell of the shared machine falls on
   both alike. Only the statement and its commit are timed. Asynchronous, every commit
   runs with ``synchronous_commit = on`` (PostgreSQL's default): the reference. Synchronous,
   the modes take turns commit by commit (``commit_plan``), each transaction setting
   ``synchronous_commit``:

   - ``local``: waits for the primary's own flush only, as every commit does with the
     standby asynchronous (a check on the reference);
   - ``remote_write``: also until the standby has written the WAL to its operating
     system, not flushed it (it survives the standby's PostgreSQL crashing, not its
     machine);
   - ``on``: also until the standby has flushed it (what Patroni's ``synchronous_mode``
     gives with PostgreSQL's default ``synchronous_commit``);
   - ``remote_apply``: until the standby has replayed it (a read there sees it).
2. **The cancellation ceiling.** ``bench.cancellations``' project side, its database,
   worker and steps (eight placers, one ``manage.py worker``; the ceiling is the highest
   rate with p99 lateness under 1 s and nothing missed), against the same primary, at
   modest rates in short steps. At each rate the standby asynchronous and synchronous
   take turns (which goes first alternates) on one database and worker, so the machine's
   load falls on both alike. Reported beside the ceiling: the rate held at every step up
   to it (``held_through``: on a loaded machine a step can hold after one that did not).

Every process (the two servers, the worker, the placers) is stopped by process group
however the run ends; the guardian (``support.guardian``) stops the servers too if this
process is SIGKILLed (their temporary directories then stay behind in /tmp).

    python -m bench.replication_cost [--commits 300] [--blocks 10]
                                     [--rates 200,400,700,1000,1300] [--step-seconds 10] [--drain 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench import cancellations
from bench.common import (
    PYTHON,
    ROOT,
    Report,
    Row,
    child_env,
    children,
    command_line,
    django_setup,
    fmt,
    manage,
    percentile,
)
from support import databases
from support.processes import guard, guarded_run, sigterm_exits, wait_for

NAME = "replication_cost"
DATABASE = "tiffin_bench_replication_cost"
# Over cluster.REPLICATED_SETTINGS (synchronous_commit on): durable commits, as in
# production, and room for the cancellation side's processes.
SETTINGS = {"fsync": "on", "full_page_writes": "on", "max_connections": "100"}
# With the standby asynchronous; with it synchronous, the modes take turns.
ASYNC_MODE = "on"
MODES = ("local", "remote_write", "on", "remote_apply")
BLOCKS = 10
KINDS = ("insert", "claim")
KIND_LABELS = {"insert": "single-row INSERT", "claim": "one-tick claim (runs_claim)"}
COMMITS = 300
RATES = (200.0, 400.0, 700.0, 1000.0, 1300.0)
STEP_SECONDS = 10.0
DRAIN_SECONDS = 10.0
STANDBYS = {"async": "asynchronous standby", "sync": "synchronous standby"}
T0 = datetime(2027, 3, 1, tzinfo=UTC)
COMMIT_TABLE = (
    "CREATE TABLE bench_commits (id bigserial PRIMARY KEY, payload text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now())"
)
SET_COMMIT_MODE = "SELECT set_config('synchronous_commit', %s, true)"


# --- Pure helpers -------------------------------------------------------------------------


def commit_plan(modes: Sequence[str], commits: int) -> list[str]:
    """The order of the commits: ``commits`` rounds of one commit per mode, each round
    starting one mode further on, so every mode is measured as often, next to the same
    neighbours and in each position of a round alike."""
    return [modes[(turn + k) % len(modes)] for turn in range(commits) for k in range(len(modes))]


def block_sizes(commits: int, blocks: int) -> list[int]:
    """``commits`` turns split into ``blocks`` blocks as evenly as they go (the first
    ones one longer), none empty."""
    blocks = min(blocks, commits)
    return [commits // blocks + (1 if i < commits % blocks else 0) for i in range(blocks)]


def latencies(samples: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean and max of ``samples`` (seconds), in milliseconds."""
    if not samples:
        return {"p50": math.nan, "p99": math.nan, "mean": math.nan, "max": math.nan}
    ms = [s * 1000 for s in samples]
    return {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "mean": statistics.fmean(ms), "max": max(ms)}


# --- The latency child (python -m bench.replication_cost --latency URL OUT) --------------


def latency_child(url: str, out: Path, commits: int, blocks: int) -> None:
    """In each of ``blocks`` blocks, the standby asynchronous then synchronous (the other
    way round every other block): commit INSERTs and claims in ``commit_plan`` order, one
    of each per turn, each transaction under its mode's ``synchronous_commit``; write the
    seconds per standby, kind and mode, and the standby's sync_state around each block."""
    django_setup(url)
    from django.db import connection, transaction

    from scheduling.dispatch import runs_claim
    from scheduling.models import JobKind, RunStatus, Trigger
    from scheduling.policies import PlannedTick
    from scheduling.registry import Job

    server = url.rsplit("/", 1)[0]
    plans = {"async": [ASYNC_MODE], "sync": list(MODES)}
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        standby: {kind: {mode: [] for mode in modes} for kind in KINDS} for standby, modes in plans.items()
    }
    jobs = {standby: Job(name=f"bench-commit-{standby}", handler=lambda ctx: None, kind=JobKind.CRON, cron="* * * * *")
            for standby in plans}  # fmt: skip
    states: list[tuple[str, str | None]] = []
    n = 0
    connection.ensure_connection()
    with psycopg.connect(url) as conn:
        for block, size in enumerate(block_sizes(commits, blocks)):
            for standby in ("async", "sync") if block % 2 == 0 else ("sync", "async"):
                standby_set(server, synchronous=standby == "sync")
                states.append((standby, _sync_state(server)))
                for mode in commit_plan(plans[standby], size):
                    n += 1
                    conn.execute(SET_COMMIT_MODE, [mode])
                    started = time.perf_counter()
                    conn.execute("INSERT INTO bench_commits (payload) VALUES (%s)", [f"{standby}-{n}"])
                    conn.commit()
                    samples[standby]["insert"][mode].append(time.perf_counter() - started)

                    tick = T0 + timedelta(minutes=n)
                    plan = [PlannedTick(tick, RunStatus.ENQUEUED)]
                    with transaction.atomic():
                        with connection.cursor() as cursor:
                            cursor.execute(SET_COMMIT_MODE, [mode])
                        started = time.perf_counter()
                        won = runs_claim(job=jobs[standby], plan=plan, trigger=Trigger.CRON, now=tick)
                    samples[standby]["claim"][mode].append(time.perf_counter() - started)
                    if len(won) != 1:
                        raise SystemExit(f"the claim of {tick} was not won")
                states.append((standby, _sync_state(server)))
    out.write_text(json.dumps({"samples": samples, "states": states}))


# --- The ceiling child (python -m bench.replication_cost --ceiling OUT) --------------------


def ceiling_child(out: Path, args: argparse.Namespace) -> None:
    """``bench.cancellations``' project side on the server at BENCH_POSTGRES_URL (the
    throwaway primary): its database, its worker, then its steps, the standby
    asynchronous and synchronous taking turns at each rate (which goes first alternates),
    each stepping on until a step misses an order; write the steps and the standby's
    sync_state read before each."""
    argv = ["--only", "project", "--rates", ",".join(f"{rate:g}" for rate in args.rates)]
    argv += ["--step-seconds", f"{args.step_seconds:g}", "--drain", f"{args.drain:g}"]
    side_args = cancellations.arguments(cancellations.argument_parser(), argv)
    direct = cancellations.side_database("project", side_args)
    server = direct.rsplit("/", 1)[0]
    steps: dict[str, list[dict[str, Any]]] = {"async": [], "sync": []}
    states: list[tuple[str, str | None]] = []
    with children(f"{NAME}-ceiling") as (started, logs):
        env = child_env(
            direct, ORDER_ACCEPT_TIMEOUT_SECONDS=str(cancellations.TIMEOUT_SECONDS), DATABASE_CONN_MAX_AGE="60"
        )
        workers = cancellations._workers_start("project", side_args, env, started, logs)
        cancellations._wait_for_worker(direct, "project", workers[0])
        for number, rate in enumerate(side_args.rates):
            for standby in ("async", "sync") if number % 2 == 0 else ("sync", "async"):
                if steps[standby] and (steps[standby][-1]["missed"] or steps[standby][-1]["errors_count"]):
                    continue
                standby_set(server, synchronous=standby == "sync")
                states.append((standby, _sync_state(server)))
                cpu = sum(w.cpu_seconds() for w in workers)
                result = cancellations.step(
                    "project",
                    side_args,
                    rate,
                    f"{standby}{number}",
                    urls=(direct, direct),
                    env=env,
                    started=started,
                    logs=logs,
                )
                result["cpu"] = sum(w.cpu_seconds() for w in workers) - cpu
                steps[standby].append(result)
                print(
                    f"{STANDBYS[standby]} at {rate:g}/s: {cancellations._line(cancellations.summary(result))}",
                    flush=True,
                )
    out.write_text(json.dumps({"steps": steps, "states": states}))


# --- The run --------------------------------------------------------------------------------


@contextmanager
def cluster() -> Iterator[str]:
    """The throwaway primary and standby, streaming, registered with the guardian; yield
    the primary's server URL (no database)."""
    import pytest

    from tests.scenarios.cluster import replicated_pair

    pgids: list[int] = []
    try:
        with replicated_pair(SETTINGS) as (primary, standby):
            pgids += [c.process.pid for c in (primary, standby) if c.process is not None]
            for pgid in pgids:
                guard(pgid)
            server = f"postgres://postgres@127.0.0.1:{primary.port}"
            wait_for(lambda: _sync_state(server) is not None, timeout=60, interval=0.1, what="the standby streaming")
            yield server
    except pytest.skip.Exception as skipped:
        raise SystemExit(str(skipped)) from None
    finally:
        for pgid in pgids:
            guard(pgid, release=True)


def _sync_state(server: str) -> str | None:
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
    return None if row is None else str(row[0])


def standby_set(server: str, synchronous: bool) -> None:
    """Make the standby synchronous (``synchronous_standby_names = '*'``) or asynchronous
    (empty), reload, and wait until the primary says so."""
    statement = (
        "ALTER SYSTEM SET synchronous_standby_names = '*'"
        if synchronous
        else "ALTER SYSTEM RESET synchronous_standby_names"
    )
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(statement)
        conn.execute("SELECT pg_reload_conf()")
    expected = "sync" if synchronous else "async"
    wait_for(lambda: _sync_state(server) == expected, timeout=30, interval=0.1, what=f"the standby {expected}")


def latency_measure(work: Path, server: str, args: argparse.Namespace) -> dict[str, Any]:
    print(f"--- commit latency: {args.blocks} blocks, asynchronous standby and synchronous in turn", flush=True)
    url = f"{server}/{DATABASE}"
    out = work / "latency.json"
    command = [PYTHON, "-m", "bench.replication_cost", "--latency", url, str(out)]
    command += ["--commits", str(args.commits), "--blocks", str(args.blocks)]
    if guarded_run(command, cwd=ROOT, env=child_env(url)):
        raise SystemExit("the latency measurement failed")
    measured: dict[str, Any] = json.loads(out.read_text())
    return measured


def ceiling_measure(work: Path, server: str, args: argparse.Namespace) -> dict[str, Any]:
    print("\n--- cancellation ceiling: asynchronous standby and synchronous in turn at each rate", flush=True)
    out = work / "ceiling.json"
    command = [PYTHON, "-m", "bench.replication_cost", "--ceiling", str(out)]
    command += ["--rates", ",".join(f"{rate:g}" for rate in args.rates), "--step-seconds", f"{args.step_seconds:g}"]
    command += ["--drain", f"{args.drain:g}"]
    env = {**os.environ, "BENCH_POSTGRES_URL": server, "PYTHONPATH": str(ROOT)}
    if guarded_run(command, cwd=ROOT, env=env):
        raise SystemExit("the cancellation side failed")
    measured: dict[str, Any] = json.loads(out.read_text())
    return measured


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Everything, on one cluster: the latencies, then the two ceilings."""
    loads = {"start": os.getloadavg()}
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="tiffin-bench-replication-") as work, cluster() as server:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            databases.database_create(conn, DATABASE)
        manage("migrate", "--noinput", "--verbosity", "0", "--skip-checks", url=f"{server}/{DATABASE}")
        with psycopg.connect(f"{server}/{DATABASE}", autocommit=True) as conn:
            conn.execute(COMMIT_TABLE)
        latency = latency_measure(Path(work), server, args)
        loads["latency"] = os.getloadavg()
        ceilings = ceiling_measure(Path(work), server, args)
        loads["ceilings"] = os.getloadavg()
    return {
        "latency": latency["samples"],
        "states": [*latency["states"], *ceilings["states"]],
        "steps": ceilings["steps"],
        "loads": loads,
        "started_at": started_at,
    }


# --- The report -----------------------------------------------------------------------------


def latency_table(samples: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """Per kind of commit, standby and synchronous_commit: n, p50, p99, mean and max."""
    header = ["commit", "standby", "synchronous_commit", "n", "p50 ms", "p99 ms", "mean ms", "max ms"]
    body = []
    for kind in KINDS:
        for standby, by_mode in samples.items():
            for mode, values in by_mode[kind].items():
                s = latencies(values)
                figures = [fmt(s[k]) for k in ("p50", "p99", "mean", "max")]
                body.append([KIND_LABELS[kind], STANDBYS[standby], mode, str(len(values)), *figures])
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    cells_of = [list(enumerate(zip(cells, widths, strict=True))) for cells in [header, *body]]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in cells).rstrip() for cells in cells_of]
    return "\n".join(["commit latency:", *lines])


def held_through(steps: list[dict[str, Any]]) -> float:
    """The highest rate placed before the first step that did not hold (0 if the first
    did not): a ceiling that a lucky step after a failed one cannot raise."""
    held = 0.0
    for step in steps:
        if not step["held"]:
            break
        held = max(held, step["rate"])
    return held


def report(args: argparse.Namespace, measured: dict[str, Any], partial: bool) -> Report:
    rep = Report(
        name=NAME,
        title=(
            "replication cost: a synchronous standby against the same standby asynchronous "
            f"(commit latency, {args.commits} commits per mode in {args.blocks} blocks; cancellation ceiling at "
            f"{', '.join(fmt(r) for r in args.rates)} orders/s, {args.step_seconds:g} s steps)"
        ),
        command=command_line("bench.replication_cost"),
        project="the standby synchronous (synchronous_standby_names '*'), synchronous_commit as each row says",
        reference="the same standby asynchronous (synchronous_standby_names empty), synchronous_commit on",
        partial=partial,
        started_at=measured["started_at"],
    )
    samples = measured["latency"]
    for kind in KINDS:
        reference = latencies(samples["async"][kind][ASYNC_MODE])
        for mode in MODES:
            mine = latencies(samples["sync"][kind][mode])
            for p in ("p50", "p99"):
                measure = f"{KIND_LABELS[kind]} commit {p}, synchronous_commit {mode}"
                rep.add(Row(measure, "ms", mine[p], reference[p], "lower"))
    steps = {standby: [cancellations.summary(r) for r in runs] for standby, runs in measured["steps"].items()}
    wrong = sum(s["wrong"] for side in steps.values() for s in side)
    rep.add(
        Row(
            "cancellation ceiling: highest rate with p99 < 1 s, none missed",
            "/s",
            cancellations.ceiling(steps["sync"]),
            cancellations.ceiling(steps["async"]),
            "higher",
        ),
        Row(
            "the same, every step up to it held",
            "/s",
            held_through(steps["sync"]),
            held_through(steps["async"]),
            "higher",
        ),
        Row("wrongly cancelled (early or accepted), both standbys", "orders", wrong, None, None, "0", wrong == 0),
    )
    states = [tuple(state) for state in measured["states"]]
    as_set = sum(standby == seen for standby, seen in states)
    rep.add(Row("standby's sync_state as set, read around each block", "reads", f"{as_set} of {len(states)}",
                None, None, "all", as_set == len(states)))  # fmt: skip
    rep.tables.append(latency_table(samples))
    rep.tables.append(cancellations.steps_table(measured["steps"], labels=STANDBYS))
    top = max(args.rates)
    for standby, side in steps.items():
        if len(side) == len(args.rates) and all(s["held"] for s in side):
            rep.note(f"{STANDBYS[standby]}: every step held, up to {fmt(top)}/s: its ceiling is at least that")
    rep.note(
        "synchronous_commit local with the standby synchronous waits for the primary's flush only, "
        "as every commit does with it asynchronous: compare its line with the asynchronous standby's"
    )
    rep.note(
        "load average (1, 5, 15 min): "
        + "; ".join(f"{when} {' / '.join(f'{x:.1f}' for x in load)}" for when, load in measured["loads"].items())
    )
    rep.note(
        "primary and standby: throwaway PostgreSQL servers on this machine "
        "(fsync and full_page_writes on), streaming over 127.0.0.1"
    )
    rep.note("the two standbys took turns at each rate (which went first alternated), on one database and worker")
    return rep


def main() -> int:
    parser = argument_parser()
    args = parser.parse_args()
    if args.latency:
        url, out = args.latency
        latency_child(url, Path(out), args.commits, args.blocks)
        return 0
    if args.ceiling:
        ceiling_child(Path(args.ceiling), args)
        return 0
    partial = vars(args) != vars(parser.parse_args([]))
    with sigterm_exits():  # SIGTERM runs the finally blocks that stop the servers
        measured = measure(args)
    return report(args, measured, partial).finish()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=_positive, default=COMMITS, help="commits of each kind per mode")
    parser.add_argument("--rates", type=cancellations._rates, default=RATES, help="orders per second per step")
    parser.add_argument("--step-seconds", type=float, default=STEP_SECONDS, help="seconds of placing per step")
    parser.add_argument("--drain", type=float, default=DRAIN_SECONDS, help="seconds after a step's last deadline")
    parser.add_argument("--blocks", type=_positive, default=BLOCKS, help="blocks of async, then sync, commits")
    parser.add_argument("--latency", nargs=2, metavar=("URL", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--ceiling", metavar="OUT", help=argparse.SUPPRESS)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
