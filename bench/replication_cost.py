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
   ``--commits`` of each per mode. The modes take turns commit by commit (``commit_plan``),
   so a busy moment of the shared machine falls on each alike; only the statement and its
   commit are timed. With the standby synchronous (``synchronous_standby_names = '*'``)
   each transaction sets ``synchronous_commit``:

   - ``local``: waits for the primary's own flush only, which is what every commit waits
     for with an asynchronous standby: the reference;
   - ``remote_write``: also until the standby has written the WAL (to its operating
     system, not yet flushed: lost if both servers crash at once);
   - ``on``: also until the standby has flushed it (what Patroni's ``synchronous_mode``
     gives with PostgreSQL's default ``synchronous_commit``);
   - ``remote_apply``: until the standby has replayed it (a read there sees it).

   Before that, with ``synchronous_standby_names`` empty (the standby asynchronous), the
   same commits with ``synchronous_commit = on``: the check that ``local`` is the
   asynchronous cost.
2. **The cancellation ceiling.** ``bench.cancellations``' project side, unchanged (eight
   placers, one ``manage.py worker``, the highest rate with p99 lateness under 1 s and
   nothing missed), run against the same primary once with the standby asynchronous and
   once synchronous, at modest stepped rates in short steps.

Every process (the two servers, the worker, the placers) is stopped by process group
however the run ends; the guardian (``bench.guardian``) stops the servers too if this
process is SIGKILLed (their temporary directories then stay behind in /tmp).

    python -m bench.replication_cost [--commits 300] [--rates 100,200,300,450,600] [--step-seconds 10] [--drain 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
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
    django_setup,
    fmt,
    guard,
    manage,
    percentile,
    run,
    stop_on_sigterm,
)
from simulation.processes import wait_for

NAME = "replication_cost"
DATABASE = "tiffin_bench_replication_cost"
# Over cluster.REPLICATED_SETTINGS (synchronous_commit on): durable commits, as in
# production, and room for the cancellation side's processes.
SETTINGS = {"fsync": "on", "full_page_writes": "on", "max_connections": "100"}
REFERENCE_MODE = "local"
MODES = (REFERENCE_MODE, "remote_write", "on", "remote_apply")
KINDS = ("insert", "claim")
KIND_LABELS = {"insert": "single-row INSERT", "claim": "one-tick claim (runs_claim)"}
COMMITS = 300
RATES = (100.0, 200.0, 300.0, 450.0, 600.0)
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


def latencies(samples: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean and max of ``samples`` (seconds), in milliseconds."""
    if not samples:
        return {"p50": math.nan, "p99": math.nan, "mean": math.nan, "max": math.nan}
    ms = [s * 1000 for s in samples]
    return {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "mean": statistics.fmean(ms), "max": max(ms)}


# --- The latency child (python -m bench.replication_cost --latency URL OUT TAG) ------------


def latency_child(url: str, out: Path, tag: str, modes: Sequence[str], commits: int) -> None:
    """Commit INSERTs and claims in ``commit_plan`` order, one of each per turn, each
    transaction under its mode's ``synchronous_commit``; write the seconds per kind and mode."""
    django_setup(url)
    from django.db import connection, transaction

    from scheduling.dispatch import runs_claim
    from scheduling.models import JobKind, RunStatus, Trigger
    from scheduling.policies import PlannedTick
    from scheduling.registry import Job

    job = Job(name=f"bench-commit-{tag}", handler=lambda ctx: None, kind=JobKind.CRON, cron="* * * * *")
    samples: dict[str, dict[str, list[float]]] = {kind: {mode: [] for mode in modes} for kind in KINDS}
    connection.ensure_connection()
    with psycopg.connect(url) as conn:
        for n, mode in enumerate(commit_plan(modes, commits)):
            conn.execute(SET_COMMIT_MODE, [mode])
            started = time.perf_counter()
            conn.execute("INSERT INTO bench_commits (payload) VALUES (%s)", [f"{tag}-{n}"])
            conn.commit()
            samples["insert"][mode].append(time.perf_counter() - started)

            tick = T0 + timedelta(minutes=n)
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(SET_COMMIT_MODE, [mode])
                started = time.perf_counter()
                won = runs_claim(job=job, plan=[PlannedTick(tick, RunStatus.ENQUEUED)], trigger=Trigger.CRON, now=tick)
            samples["claim"][mode].append(time.perf_counter() - started)
            if len(won) != 1:
                raise SystemExit(f"the claim of {tick} was not won")
    out.write_text(json.dumps(samples))


# --- The ceiling child (python -m bench.replication_cost --ceiling OUT) --------------------


def ceiling_child(out: Path, args: argparse.Namespace) -> None:
    """``bench.cancellations``' project side on the server at BENCH_POSTGRES_URL (the
    throwaway primary); write its steps."""
    argv = ["--only", "project", "--rates", ",".join(f"{rate:g}" for rate in args.rates)]
    argv += ["--step-seconds", f"{args.step_seconds:g}", "--drain", f"{args.drain:g}"]
    side_args = cancellations.arguments(cancellations.argument_parser(), argv)
    out.write_text(json.dumps(cancellations.side("project", side_args)))


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


def latency_measure(
    work: Path, server: str, tag: str, modes: Sequence[str], commits: int
) -> dict[str, dict[str, list[float]]]:
    url = f"{server}/{DATABASE}"
    out = work / f"latency-{tag}.json"
    command = [PYTHON, "-m", "bench.replication_cost", "--latency", url, str(out), tag]
    command += ["--modes", ",".join(modes), "--commits", str(commits)]
    if run(command, cwd=ROOT, env=child_env(url)):
        raise SystemExit(f"the latency measurement ({tag}) failed")
    samples: dict[str, dict[str, list[float]]] = json.loads(out.read_text())
    return samples


def ceiling_measure(work: Path, server: str, standby: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    print(f"\n--- cancellation ceiling, {STANDBYS[standby]}", flush=True)
    out = work / f"ceiling-{standby}.json"
    command = [PYTHON, "-m", "bench.replication_cost", "--ceiling", str(out)]
    command += ["--rates", ",".join(f"{rate:g}" for rate in args.rates), "--step-seconds", f"{args.step_seconds:g}"]
    command += ["--drain", f"{args.drain:g}"]
    env = {**os.environ, "BENCH_POSTGRES_URL": server, "PYTHONPATH": str(ROOT)}
    if run(command, cwd=ROOT, env=env):
        raise SystemExit(f"the cancellation side ({STANDBYS[standby]}) failed")
    steps: list[dict[str, Any]] = json.loads(out.read_text())
    return steps


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Everything, on one cluster: the latencies, then the two ceilings."""
    loads = {"start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="tiffin-bench-replication-") as work, cluster() as server:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        manage("migrate", "--noinput", "--verbosity", "0", "--skip-checks", url=f"{server}/{DATABASE}")
        with psycopg.connect(f"{server}/{DATABASE}", autocommit=True) as conn:
            conn.execute(COMMIT_TABLE)
        print("--- commit latency, asynchronous standby (synchronous_commit on)", flush=True)
        standby_set(server, synchronous=False)
        asynchronous = latency_measure(Path(work), server, "async", ["on"], args.commits)
        print(f"--- commit latency, synchronous standby ({', '.join(MODES)}, taking turns)", flush=True)
        standby_set(server, synchronous=True)
        synchronous = latency_measure(Path(work), server, "sync", MODES, args.commits)
        sync_state = _sync_state(server)
        loads["latency"] = os.getloadavg()
        standby_set(server, synchronous=False)
        steps = {"async": ceiling_measure(Path(work), server, "async", args)}
        loads["async ceiling"] = os.getloadavg()
        standby_set(server, synchronous=True)
        steps["sync"] = ceiling_measure(Path(work), server, "sync", args)
        sync_state_after = _sync_state(server)
        loads["sync ceiling"] = os.getloadavg()
    return {
        "asynchronous": asynchronous,
        "synchronous": synchronous,
        "sync_states": [sync_state, sync_state_after],
        "steps": steps,
        "loads": loads,
    }


# --- The report -----------------------------------------------------------------------------


def latency_table(
    asynchronous: dict[str, dict[str, list[float]]], synchronous: dict[str, dict[str, list[float]]]
) -> str:
    header = ["commit", "standby", "synchronous_commit", "n", "p50 ms", "p99 ms", "mean ms", "max ms"]
    body = []
    for kind in KINDS:
        rows = [("asynchronous", "on", asynchronous[kind]["on"])]
        rows += [("synchronous", mode, synchronous[kind][mode]) for mode in MODES]
        for standby, mode, samples in rows:
            s = latencies(samples)
            body.append(
                [
                    KIND_LABELS[kind],
                    standby,
                    mode,
                    str(len(samples)),
                    *(fmt(s[k]) for k in ("p50", "p99", "mean", "max")),
                ]
            )
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()
        for cells in [header, *body]
    ]
    return "\n".join(["commit latency:", *lines])


def report(args: argparse.Namespace, measured: dict[str, Any], partial: bool) -> Report:
    rep = Report(
        name=NAME,
        title=(
            "replication cost: a synchronous standby against the same standby asynchronous "
            f"(commit latency, {args.commits} commits per mode; cancellation ceiling at "
            f"{', '.join(fmt(r) for r in args.rates)} orders/s, {args.step_seconds:g} s steps)"
        ),
        command="python -m bench.replication_cost " + " ".join(sys.argv[1:]),
        project="the standby synchronous (synchronous_standby_names '*'); commits on, remote_write, remote_apply",
        reference="the same standby asynchronous (latency: synchronous_commit local, in the same turns)",
        partial=partial,
    )
    sync = measured["synchronous"]
    for kind in KINDS:
        reference = latencies(sync[kind][REFERENCE_MODE])
        for mode in MODES[1:]:
            mine = latencies(sync[kind][mode])
            for p in ("p50", "p99"):
                rep.add(
                    Row(
                        f"{KIND_LABELS[kind]} commit {p}, synchronous_commit {mode}",
                        "ms",
                        mine[p],
                        reference[p],
                        "lower",
                    )
                )
    steps = {standby: [cancellations.summary(r) for r in runs] for standby, runs in measured["steps"].items()}
    ceilings = {standby: cancellations.ceiling(s) for standby, s in steps.items()}
    wrong = sum(s["wrong"] for side in steps.values() for s in side)
    states = measured["sync_states"]
    ceiling = "cancellation ceiling: highest rate with p99 < 1 s, none missed"
    rep.add(
        Row(ceiling, "/s", ceilings["sync"], ceilings["async"], "higher"),
        Row("wrongly cancelled (early or accepted), both standbys", "orders", wrong, None, None, "0", wrong == 0),
    )
    seen = " then ".join(map(str, states))
    rep.add(
        Row(
            "standby's sync_state around the synchronous measurements",
            "",
            seen,
            None,
            None,
            "sync",
            states == ["sync", "sync"],
        )
    )
    rep.tables.append(latency_table(measured["asynchronous"], sync))
    rep.tables.append(cancellations.steps_table(measured["steps"], labels=STANDBYS))
    asynchronous = {kind: latencies(measured["asynchronous"][kind]["on"]) for kind in KINDS}
    rep.note(
        "asynchronous standby, synchronous_commit on, measured just before: "
        + "; ".join(f"{KIND_LABELS[k]} p50 {fmt(v['p50'])} ms, p99 {fmt(v['p99'])} ms" for k, v in asynchronous.items())
        + " (the cost synchronous_commit local stands for)"
    )
    top = max(args.rates)
    for standby, value in ceilings.items():
        if value and all(s["held"] for s in steps[standby]) and len(steps[standby]) == len(args.rates):
            rep.note(f"{STANDBYS[standby]}: every step held, up to {fmt(top)}/s: its ceiling is at least that")
    rep.note(
        "load average (1, 5, 15 min): "
        + "; ".join(f"{when} {' / '.join(f'{x:.1f}' for x in load)}" for when, load in measured["loads"].items())
    )
    rep.note(
        "primary and standby: throwaway PostgreSQL servers on this machine "
        "(fsync and full_page_writes on), streaming over 127.0.0.1"
    )
    rep.note(
        "the ceilings ran one after the other (asynchronous first) on a shared 2-core machine: compare their steps too"
    )
    return rep


def main() -> int:
    parser = argument_parser()
    args = parser.parse_args()
    if args.latency:
        url, out, tag = args.latency
        latency_child(url, Path(out), tag, args.modes, args.commits)
        return 0
    if args.ceiling:
        ceiling_child(Path(args.ceiling), args)
        return 0
    stop_on_sigterm()  # SIGTERM runs the finally blocks that stop the servers
    partial = vars(args) != vars(parser.parse_args([]))
    return report(args, measure(args), partial).finish()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=_positive, default=COMMITS, help="commits of each kind per mode")
    parser.add_argument("--rates", type=cancellations._rates, default=RATES, help="orders per second per step")
    parser.add_argument("--step-seconds", type=float, default=STEP_SECONDS, help="seconds of placing per step")
    parser.add_argument("--drain", type=float, default=DRAIN_SECONDS, help="seconds after a step's last deadline")
    parser.add_argument("--latency", nargs=3, metavar=("URL", "OUT", "TAG"), help=argparse.SUPPRESS)
    parser.add_argument("--modes", type=lambda text: text.split(","), default=list(MODES), help=argparse.SUPPRESS)
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
