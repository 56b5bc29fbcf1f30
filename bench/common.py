"""Plumbing shared by the benchmarks: a fresh database each, Django set up against it,
child processes, percentiles, and one report (the printed table, the JSON file and the
exit code) so every benchmark presents its numbers the same way.

A benchmark is a module run as ``python -m bench.<name>``. It measures the project and a
reference doing the same work in the same run; the ratio between them is the number that
survives a noisy machine, the absolute figures are only what this machine did today.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import psycopg
from psycopg import sql as pgsql

from support import databases
from support.pgbouncer import Upstream, pgbouncer_accepts, pgbouncer_binary, pgbouncer_prepare
from support.processes import (
    GUARD_GRACE_SECONDS,
    cpu_seconds,
    guarded_run,
    guarded_start,
    guarded_stop,
    sigterm_exits,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
# The PostgreSQL server the benchmarks create their databases on (no database name).
SERVER_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432").rstrip("/")
# BENCH_DATABASE_PREFIX keeps benchmarks run side by side on one server apart.
DATABASE_PREFIX = os.environ.get("BENCH_DATABASE_PREFIX", "tiffin_bench_")

Better = Literal["lower", "higher"]


# --- Databases --------------------------------------------------------------------------


def database_url(name: str) -> str:
    return f"{SERVER_URL}/{DATABASE_PREFIX}{name}"


# When the server started: a benchmark during which it restarted measured nothing useful
# (other test suites on a shared machine may restart it), so its report fails.
SERVER_STARTS: dict[str, Any] = {}


def database_create(name: str) -> str:
    """Drop and create ``tiffin_bench_<name>``, migrate it with ``manage.py migrate``; return its URL."""
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        databases.database_create(conn, DATABASE_PREFIX + name)
    url = database_url(name)
    manage("migrate", "--noinput", "--verbosity", "0", "--skip-checks", url=url)
    SERVER_STARTS.setdefault("first", server_started_at())
    return url


def database_clone(source: str, name: str) -> str:
    """Drop ``tiffin_bench_<name>`` and create it as a file copy of ``tiffin_bench_<source>``;
    return its URL. Nothing may be connected to the source: close this process's
    connections first."""
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        databases.database_create(conn, DATABASE_PREFIX + name, template=DATABASE_PREFIX + source, file_copy=True)
    return database_url(name)


def database_drop(name: str) -> None:
    """Drop ``tiffin_bench_<name>`` (a benchmark whose data takes gigabytes cleans up after
    itself); close this process's own connections to it first."""
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        databases.database_drop(conn, DATABASE_PREFIX + name)


def server_started_at() -> Any:
    return sql_value(f"{SERVER_URL}/postgres", "SELECT pg_postmaster_start_time()")


def manage(*args: str, url: str, **env: str) -> None:
    """Run ``manage.py <args>`` against ``url`` and fail loudly if it fails."""
    code = guarded_run([PYTHON, "manage.py", *args], cwd=ROOT, env=child_env(url, **env))
    if code:
        raise SystemExit(f"manage.py {' '.join(args)} failed with exit code {code}")


def child_env(url: str, **extra: str) -> dict[str, str]:
    """The environment of a process working on ``url``: no inherited simulated clock."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIFFIN_CLOCK_")}
    env.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="tiffin.settings", PYTHONPATH=str(ROOT))
    env.setdefault("LOG_LEVEL", "WARNING")
    # DEBUG stays off, as in production (its query log would distort the figures), so the
    # settings need a key: one for the benchmarks' throwaway databases only.
    env.setdefault("SECRET_KEY", "tiffin-benchmarks-only-key-never-used-outside-bench-5e8f2a7c1b")
    # The benchmarks' own job modules and the simulation app are development tools.
    env.setdefault("TIFFIN_DEVELOPMENT", "1")
    env.update(extra)
    return env


def django_setup(url: str, **env: str) -> None:
    """Point this process's Django at ``url`` (before anything imports the settings)."""
    os.environ.update(child_env(url, **env))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def sql_run(url: str, statement: str, params: Sequence[Any] | Mapping[str, Any] = (), *, options: str = "") -> float:
    """Run one statement on its own autocommit connection (``options``: its settings, as
    ``-c jit=off``); return its wall time in seconds."""
    with psycopg.connect(url, autocommit=True, options=options) as conn:
        started = time.perf_counter()
        conn.execute(statement, params)
        return time.perf_counter() - started


def tables_truncate(url: str, tables: str) -> None:
    """Empty ``tables`` between rounds on a benchmark's own database. A TRUNCATE that reaches
    the ledger (directly, or by CASCADE through ``job_runs``) is refused by its guard
    (payouts/0010_ledger_truncate_guard) unless the session says so, as this one does."""
    with psycopg.connect(url, autocommit=True, options="-c tiffin.ledger_wipe=on") as conn:
        conn.execute(f"TRUNCATE {tables}".encode())


def sql_value(url: str, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]


def bulk_load(url: str, table: str, statements: Sequence[tuple[str, Sequence[Any] | Mapping[str, Any]]]) -> float:
    """Run set-based INSERTs into ``table`` fast, leaving it exactly as migrated; return seconds.

    The table's secondary indexes are dropped and rebuilt from their own definitions
    (one sort beats millions of index insertions), foreign-key triggers are skipped for
    the load (``session_replication_role = replica``; the generator only writes valid
    ids), and a VACUUM ANALYZE sets the visibility map and the statistics, as on a table
    that has been live for a while, so index-only scans and plans are what production sees.
    """
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        definitions = [
            row[0]
            for row in conn.execute(
                "SELECT indexdef FROM pg_indexes i WHERE tablename = %s AND NOT EXISTS "
                "(SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
                (table,),
            )
        ]
        names = [d.split(" INDEX ", 1)[1].split(" ON ", 1)[0] for d in definitions]
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            for name in names:
                conn.execute(pgsql.SQL("DROP INDEX {}").format(pgsql.Identifier(name)))
            for statement, params in statements:
                conn.execute(statement, params)
            for definition in definitions:
                conn.execute(definition)
        conn.execute(pgsql.SQL("VACUUM ANALYZE {}").format(pgsql.Identifier(table)))
    return time.perf_counter() - started


# --- Processes --------------------------------------------------------------------------
# Every child is guarded (support.processes: guarded_run, guarded_start): it leads a
# process group of its own, and the guardian stops that group if this process dies
# without stopping it.


@dataclass
class Child:
    """A child process whose output goes to a log file (shown if it fails)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = GUARD_GRACE_SECONDS) -> int:
        """Stop the child and every process of its group (``guarded_stop``)."""
        return guarded_stop(self.popen, grace=timeout)

    def cpu_seconds(self) -> float:
        """CPU time of the child and everything it forked (``cpu_seconds``); read it before ``stop``."""
        return cpu_seconds(self.popen.pid)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def child_start(name: str, args: Sequence[str], *, env: dict[str, str], logs: Path) -> Child:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        popen = guarded_start(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Child(name=name, popen=popen, log=log)


@contextmanager
def children(bench: str) -> Iterator[tuple[list[Child], Path]]:
    """A list to start children into; all still running are stopped on the way out, a
    SIGTERM to this process included (``sigterm_exits``); the guardian covers SIGKILL."""
    logs = Path(tempfile.mkdtemp(prefix=f"tiffin-bench-{bench}-"))
    started: list[Child] = []
    with sigterm_exits():
        try:
            yield started, logs
        finally:
            for child in started:
                child.stop()


# Server connections the benchmark's PgBouncer keeps per database: more than its
# processes use at once (eight placers, the workers, the sampler).
BENCH_POOL_SIZE = 20


@contextmanager
def pgbouncer_started(logs: Path) -> Iterator[int]:
    """A transaction-mode PgBouncer of this benchmark's own in front of the server, set up
    as the simulation's (``support.pgbouncer``) and started as a child like any other (its
    own group, registered with the guardian, stopped with the benchmark); yield its port."""
    binary = pgbouncer_binary()
    if binary is None:
        raise SystemExit("pgbouncer is not installed: run `make scenario-deps` (apt-get install pgbouncer)")
    server = urlsplit(SERVER_URL)
    upstream = Upstream(
        host=server.hostname or "127.0.0.1", port=server.port or 5432, user=server.username or "postgres"
    )
    prepared = pgbouncer_prepare(upstream, binary=binary, pool_size=BENCH_POOL_SIZE)
    child = child_start("pgbouncer", prepared.command, env=dict(os.environ), logs=logs)
    try:
        deadline = time.monotonic() + 15
        while not pgbouncer_accepts(prepared.port):
            if time.monotonic() > deadline or child.popen.poll() is not None:
                raise SystemExit(f"pgbouncer did not start:\n{child.tail()}")
            time.sleep(0.1)
        yield prepared.port
    finally:
        child.stop()
        shutil.rmtree(prepared.workdir, ignore_errors=True)


# --- Numbers ----------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by the nearest-rank method: a value actually observed."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(math.ceil(p / 100 * len(ordered)), 1)
    return ordered[rank - 1]


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    seconds: float = 0.0

    def __enter__(self) -> Stopwatch:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._started


# --- The report -------------------------------------------------------------------------


@dataclass
class Row:
    """One measured quantity, for the project and the reference, and its goal if any.

    ``better`` says which way is good, so the ratio is always the project's cost over the
    reference's: project / reference for times and counts of waste, reference / project
    for rates. Above 1 the project is slower. ``passed`` is None for a figure reported
    without a goal.
    """

    measure: str
    unit: str
    project: float | int | str | None
    reference: float | int | str | None = None
    better: Better | None = "lower"
    goal: str = ""
    passed: bool | None = None
    ratio: float | None = None

    def __post_init__(self) -> None:
        if self.ratio is None and self.better is not None:
            self.ratio = _ratio(self.project, self.reference, self.better)


def _ratio(project: object, reference: object, better: Better) -> float | None:
    if not isinstance(project, int | float) or not isinstance(reference, int | float):
        return None
    cost, base = (project, reference) if better == "lower" else (reference, project)
    if base == 0 or math.isnan(cost) or math.isnan(base):
        return None
    return cost / base


def command_line(module: str) -> str:
    """How this run was started, ``python -m <module> <its arguments>``: a report's command."""
    return f"python -m {module} " + " ".join(sys.argv[1:])


@dataclass
class Report:
    name: str
    title: str
    command: str
    project: str
    reference: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Pre-rendered tables printed after the rows (a benchmark's per-size or per-step detail).
    tables: list[str] = field(default_factory=list)
    # Figures kept in the JSON for what is drawn or compared later (benchmark 3's steps, for
    # the lateness plot and the goals across its variants); not printed.
    data: dict[str, Any] = field(default_factory=dict)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    # A development run (part of the sides, other rates or step lengths): its result goes to
    # bench/results/partial/, which BENCHMARKS.md is not written from, so it never replaces
    # the full run's.
    partial: bool = False

    @property
    def passed(self) -> bool:
        return all(row.passed is not False for row in self.rows)

    def add(self, *rows: Row) -> None:
        self.rows.extend(rows)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def finish(self) -> int:
        """Print the table, write bench/results/<name>.json (a partial run's under partial/);
        return the exit code."""
        if "first" in SERVER_STARTS and server_started_at() != SERVER_STARTS["first"]:
            self.add(Row("PostgreSQL restarted during the run", "", "yes", None, None, "no", False))
        text = self.render()
        print(text, flush=True)
        directory = RESULTS / "partial" if self.partial else RESULTS
        directory.mkdir(parents=True, exist_ok=True)
        data = {
            **{k: v for k, v in asdict(self).items() if k != "rows"},
            "rows": [asdict(row) for row in self.rows],
            "passed": self.passed,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "table": text,
        }
        (directory / f"{self.name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
        return 0 if self.passed else 1

    def render(self) -> str:
        header = ["measure", "unit", "project", "reference", "ratio", "goal", "result"]
        body = [
            [row.measure, row.unit, fmt(row.project), fmt(row.reference), fmt(row.ratio), row.goal, _verdict(row)]
            for row in self.rows
        ]
        widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
        right = {2, 3, 4}

        def line(cells: list[str]) -> str:
            cols = enumerate(zip(cells, widths, strict=True))
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in cols).rstrip()

        rule = "-" * max(len(line(cells)) for cells in [header, *body])
        out = [f"== {self.title} ==", f"project:   {self.project}", f"reference: {self.reference}", rule]
        out += [line(header), rule, *[line(cells) for cells in body], rule]
        out += [*self.tables, *([rule] if self.tables else [])]
        out += [f"note: {note}" for note in self.notes]
        out.append(f"{'PASS' if self.passed else 'FAIL'}  ({self.command})")
        return "\n".join(out)


def _verdict(row: Row) -> str:
    return "-" if row.passed is None else ("PASS" if row.passed else "FAIL")


def fmt(value: object) -> str:
    """Numbers to three significant figures (integers exactly), '-' for nothing."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{max(2 - math.floor(math.log10(abs(value))), 0)}f}"
    return str(value)


def machine() -> dict[str, Any]:
    """What the numbers were measured on (they mean little without it)."""
    mem_kb = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "postgresql": sql_value(f"{SERVER_URL}/postgres", "SHOW server_version"),
        "postgresql_changed": postgresql_changed(),
        "python": sys.version.split()[0],
    }


# The server settings that move these figures, reported when they differ from PostgreSQL's
# built-in defaults (this machine's server runs with autovacuum off, for one).
SETTINGS_REPORTED = (
    "autovacuum", "checkpoint_timeout", "effective_cache_size", "fsync", "full_page_writes", "jit",
    "max_wal_size", "random_page_cost", "shared_buffers", "synchronous_commit", "wal_level", "work_mem",
)  # fmt: skip


def postgresql_changed() -> dict[str, str]:
    """Each of SETTINGS_REPORTED whose value is not PostgreSQL's built-in default, with its unit."""
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, setting || coalesce(' x ' || unit, '') FROM pg_settings "
            "WHERE name = ANY(%s) AND setting IS DISTINCT FROM boot_val ORDER BY name",
            [list(SETTINGS_REPORTED)],
        ).fetchall()
    return dict(rows)


def official_run(module: str, args: argparse.Namespace, parse: Callable[[list[str]], argparse.Namespace]) -> bool:
    """Whether ``args`` are what ``make bench`` or ``make bench-large`` run ``bench.<module>``
    with (bench/__main__.py's tables), each read by ``parse`` as this run's were, so the
    order of the options and what they imply (``--quick``'s 10 s steps) do not matter. Any
    other run is a development run: its result, and a curve's plot, go to
    bench/results/partial/, never over those BENCHMARKS.md shows."""
    from bench.__main__ import BENCHMARKS, LARGE

    return any(
        vars(parse(rest)) == vars(args) for name, *rest in [*BENCHMARKS.values(), *LARGE.values()] if name == module
    )
