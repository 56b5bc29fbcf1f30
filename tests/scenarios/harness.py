"""The failure scenarios' harness: a fresh PostgreSQL database per scenario, real
processes started through ``support.processes`` (the code ``manage.py simulate``
uses), and read-only SQL for the assertions.

Databases are cloned from a template migrated once per session (CREATE DATABASE ...
TEMPLATE takes a fraction of a second; migrating takes several), named with this
process's pid so parallel runs on one server never collide, and dropped afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from scheduling import cron
from support.databases import database_create, database_drop
from support.processes import (
    PROJECT_DIR,
    Fleet,
    Process,
    SimulatedTime,
    run_in_group,
    wait_for,
    wait_while_progressing,
)

# Every scenario process gets these: scheduler loops sleep at most 0.2 real seconds (ticks
# and due runs are seen promptly), django-q2 polls its queue every 0.05 s.
PROCESS_ENVIRONMENT = {"SCHEDULER_POLL_SECONDS": "0.2", "Q_POLL_SECONDS": "0.05", "LOG_LEVEL": "INFO"}

# Real seconds a scenario waits without progress (no step of the work it waits for done)
# before it fails: a loaded machine gets as long as it keeps going, a stuck system fails
# this long after its last step. Waits follow what is left in the database, never a
# fixed number of seconds.
STALL_SECONDS = 30.0
# Booting Django and django-q2 on a loaded machine is one long step with nothing to read
# in the database before its end: it gets twice a step's patience.
BOOT_STALL_SECONDS = 2 * STALL_SECONDS
# The last resort against a hang outside every wait that follows progress (a statement
# blocked for good, a process that never exits, a subprocess waited on without a bound):
# the ``pytest.mark.timeout`` of every scenario module, and nothing else bounds a scenario
# as a whole. It is no measure of the machine's speed: a stuck system fails its wait
# STALL_SECONDS (BOOT_STALL_SECONDS while booting) after its last step, long before this.
# Thirty minutes, because at load ~20 on two cores the scenarios took 67 minutes together
# (75 s each on average) and three ran past 180-240 s while their waits still saw progress,
# so a test that keeps going is not cut off; and one hang costs a third of the 90 minutes
# `.ci/run` has, so CI still ends with pytest's report (the hung stack, the fleet stopped)
# instead of the job being killed with nothing said.
HANG_GUARD_SECONDS = 30 * 60
# More steps (a run's events, scheduler passes) than a scenario takes: what
# ``Scenario.wait_for_run`` and ``wait_run_reaches`` count down from.
_STEPS_BOUND = 10**9


# Real seconds a manage.py command run to its end gets between SIGTERM and SIGKILL when the
# test ends first: a simulate stops its servers in that time.
MANAGE_STOP_GRACE_SECONDS = 20.0


def manage_run(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py <args>`` to its end with exactly the environment ``env``, in its own
    process group; its output captured as text. No number of seconds cuts it off: a
    command bounds its own waits (simulate's governor and settle follow its servers'
    progress, and fail a stall after its last step); only a hang outside them meets the
    scenario's last-resort guard (``HANG_GUARD_SECONDS``, its module's
    ``pytest.mark.timeout``). However the call ends (that guard included) the group is
    stopped, SIGTERM first, so a simulate stops the servers it started."""
    command = [sys.executable, str(PROJECT_DIR / "manage.py"), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = run_in_group(command, env=env, stdout=out, stderr=err, grace=MANAGE_STOP_GRACE_SECONDS)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            command, code, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        )


def manage_at(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py <args>`` to its end against the database at ``url`` (a cluster's
    multi-host URL, before any fleet exists), with the scenarios' process environment."""
    return manage_run({**os.environ, **PROCESS_ENVIRONMENT, "DATABASE_URL": url}, *args)


def manage_output(url: str, *args: str, allowed: tuple[int, ...] = (0,)) -> str:
    """``manage.py <args>`` against the database at ``url`` (``manage_run``); its stdout.
    Fails unless it exits with one of ``allowed``."""
    done = manage_run({**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING"}, *args)
    assert done.returncode in allowed, f"manage.py {' '.join(args)} failed ({done.returncode}):\n{done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str

    def url(self, database: str, *, port: int | None = None, query: str = "") -> str:
        auth = f"{self.user}:{self.password}" if self.password else self.user
        suffix = f"?{query}" if query else ""
        return f"postgres://{auth}@{self.host}:{port or self.port}/{database}{suffix}"

    def connect(self, database: str = "postgres", **kwargs: Any) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=database,
            # A wait's look at the database is one of its steps: on a loaded machine a
            # connection may take seconds, and only a stall's length of none fails it.
            connect_timeout=int(STALL_SECONDS),
            **{"autocommit": True, **kwargs},
        )

    def create_database(self, name: str, *, template: str | None = None) -> None:
        with self.connect() as conn:
            database_create(conn, name, template=template)

    def drop_database(self, name: str) -> None:
        with self.connect() as conn:
            database_drop(conn, name)

    def wait_ready(self, *, timeout: float = BOOT_STALL_SECONDS) -> None:
        """Wait until the server takes connections: a start (or a crash recovery) is one
        step with nothing to read before its end, so it gets a boot's patience."""

        def ready() -> bool:
            try:
                with self.connect() as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                return False

        wait_for(ready, timeout=timeout, interval=0.25, what="PostgreSQL accepting connections")


@dataclass
class ScenarioDatabase:
    server: PostgresServer
    name: str

    @property
    def url(self) -> str:
        return self.server.url(self.name)

    def rows(self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        with self.server.connect(self.name) as conn:
            return conn.execute(query.encode(), params).fetchall()

    def scalar(self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        rows = self.rows(query, params)
        return rows[0][0] if rows else None

    @contextmanager
    def holding(self, statement: str) -> Iterator[int]:
        """Run ``statement`` (a LOCK TABLE, say) in a transaction kept open for the block;
        yield the holding backend's pid. The scenarios pin a worker at a precise point of
        its run this way: it blocks on the lock, and the fault is injected while it waits."""
        conn = self.server.connect(self.name, autocommit=False)
        try:
            conn.execute(statement.encode())
            yield conn.info.backend_pid
        finally:
            with suppress(psycopg.Error):  # the server may have been restarted meanwhile
                conn.rollback()
            conn.close()

    def wait_blocked_by(self, holder: int, *, timeout: float, statement_mentions: str = "") -> int:
        """Wait until a backend waits for a lock ``holder`` holds, running a statement that
        mentions ``statement_mentions`` (any statement when empty); return its pid."""
        query = (
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid)) AND strpos(query, %s) > 0 LIMIT 1"
        )
        found: list[int] = []

        def blocked() -> bool:
            found[:] = [row[0] for row in self.rows(query, [holder, statement_mentions])]
            return bool(found)

        wait_for(blocked, timeout=timeout, interval=0.05, what=f"a backend blocked by {holder}")
        return found[0]

    def backend_gone(self, pid: int) -> bool:
        return self.scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]) == 0

    def counts(self, query: str, params: Sequence[Any] = ()) -> dict[Any, int]:
        """``SELECT key, count(*) ... GROUP BY key`` as a dict."""
        return dict(self.rows(query, params))


def wait_runs_succeeded(db: ScenarioDatabase, job_name: str, count: int, *, stall: float = STALL_SECONDS) -> int:
    """Wait until ``count`` runs of ``job_name`` succeeded on ``db``, for as long as more keep
    succeeding (TimeoutError after ``stall`` seconds without one); how many did."""
    query = "SELECT count(*) FROM job_runs WHERE job_name = %s AND status = 'succeeded'"
    done = [0]

    def left() -> int:
        done[0] = int(db.scalar(query, [job_name]))
        return max(count - done[0], 0)

    wait_while_progressing(left, stall=stall, what=f"{count} succeeded {job_name} runs")
    return done[0]


@dataclass(frozen=True)
class PinnedRun:
    """A payout run pinned by ``Scenario.payout_run_pinned``: its first attempt's fence,
    and the database backend of its blocked write."""

    run_id: int
    fence: int
    backend: int


class Scenario:
    """One scenario's database, processes and clock helpers."""

    def __init__(self, *, db: ScenarioDatabase, fleet: Fleet) -> None:
        self.db = db
        self.fleet = fleet

    def manage(
        self, *args: str, clock: SimulatedTime | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``manage.py <args>`` to completion against the scenario's database (with
        ``clock`` and ``env`` on top of the fleet's environment)."""
        environment = {**self.fleet.environment, **(clock.environment() if clock else {}), **(env or {})}
        return manage_run(environment, *args)

    def seed(self, *, restaurants: int, weeks: int, now: datetime) -> None:
        done = self.manage(
            "seed_demo", "--restaurants", str(restaurants), "--weeks", str(weeks), "--now", now.isoformat()
        )
        assert done.returncode == 0, done.stderr

    def start_schedulers(
        self, clock: SimulatedTime, count: int, *, skews: Sequence[float] = (), prefix: str = "scheduler"
    ) -> list[Process]:
        skews = list(skews) or [0.0] * count
        return [
            self.fleet.start(f"{prefix}-{i}", ["run_scheduler"], env=clock.environment(skew=skews[i]))
            for i in range(count)
        ]

    def start_workers(
        self, clock: SimulatedTime, count: int, *, q_workers: int = 2, skews: Sequence[float] = ()
    ) -> list[Process]:
        skews = list(skews) or [0.0] * count
        return [
            self.fleet.start(
                f"worker-{i}",
                ["worker", "--no-scheduler"],
                env={**clock.environment(skew=skews[i]), "Q_WORKERS": str(q_workers)},
            )
            for i in range(count)
        ]

    def stop(self, prefix: str) -> None:
        self.fleet.stop(self.fleet.named(prefix))

    def wait_until_idle(self, *, stall: float = STALL_SECONDS, jobs: Sequence[str] | None = None) -> None:
        """Wait until no run (of ``jobs``, or any) is enqueued or running, for as long as
        their number keeps falling; TimeoutError after ``stall`` seconds in which none finished."""
        query = "SELECT count(*) FROM job_runs WHERE status IN ('enqueued', 'running')"
        params: list[Any] = []
        if jobs is not None:
            query += " AND job_name = ANY(%s)"
            params.append(list(jobs))
        self.wait_until_none(query, params, stall=stall, what="runs finishing")

    def wait_until_none(
        self, query: str, params: Sequence[Any] = (), *, stall: float = STALL_SECONDS, what: str
    ) -> None:
        """Wait until ``query`` (a ``SELECT count(*)`` of the work left) counts 0, for as long
        as the count keeps falling (``wait_while_progressing``)."""
        wait_while_progressing(lambda: int(self.db.scalar(query, params)), stall=stall, what=what)

    def wait_for_run(
        self, job_name: str, status: str, *, attempt: int | None = None, stall: float = STALL_SECONDS
    ) -> int:
        """Wait until a run of ``job_name`` is in ``status`` (on its ``attempt``, if given);
        return its id. For as long as the schedulers keep going: each scheduler pass and each
        event of the job's runs is a step (``wait_while_progressing``); TimeoutError after
        ``stall`` seconds without one."""
        query = "SELECT id FROM job_runs WHERE job_name = %s AND status = %s"
        params: list[Any] = [job_name, status]
        if attempt is not None:
            query += " AND attempts = %s"
            params.append(attempt)
        steps = (
            "SELECT (SELECT coalesce(sum(passes), 0) FROM job_scheduler_nodes)"
            " + (SELECT count(*) FROM job_run_events e JOIN job_runs r ON r.id = e.run_id WHERE r.job_name = %s)"
        )
        found: list[int] = []

        def left() -> int:  # 0 once seen; before that, one less for every step taken
            found[:] = [row[0] for row in self.db.rows(query + " ORDER BY id LIMIT 1", params)]
            return 0 if found else max(_STEPS_BOUND - int(self.db.scalar(steps, [job_name])), 1)

        wait_while_progressing(left, stall=stall, interval=0.02, what=f"a {status} run of {job_name}")
        return found[0]

    def wait_run_reaches(self, run_id: int, status: str, *, stall: float = STALL_SECONDS) -> None:
        """Wait until run ``run_id`` is in ``status``, for as long as it keeps moving: each
        event it records (abandoned, enqueued, started, rejected...) is a step; TimeoutError
        after ``stall`` seconds without one. A lease running out is one such step."""
        status_now = "SELECT status FROM job_runs WHERE id = %s"
        events = "SELECT count(*) FROM job_run_events WHERE run_id = %s"

        def left() -> int:  # 0 once there; before that, one less for every step taken
            if self.db.scalar(status_now, [run_id]) == status:
                return 0
            return max(_STEPS_BOUND - int(self.db.scalar(events, [run_id])), 1)

        wait_while_progressing(left, stall=stall, interval=0.05, what=f"run {run_id} reaching {status}")

    @contextmanager
    def payout_run_pinned(self, lock: str, *, start: datetime, speed: float) -> Iterator[PinnedRun]:
        """The preamble of the fault scenarios: seed 30 restaurants with six weeks of orders
        up to ``start`` (just before the Sunday payout tick), take ``lock`` (the table the
        payout run's next statement needs), start two workers and two schedulers on a clock
        from ``start`` at ``speed``, and wait until the run's first attempt is blocked on the
        lock. The block injects the fault while the lock is held; leaving it lets go."""
        self.seed(restaurants=30, weeks=6, now=start)
        clock = SimulatedTime.starting(start, speed=speed, lead=4.0)
        with self.db.holding(lock) as holder:
            self.start_workers(clock, 2, q_workers=2)
            self.start_schedulers(clock, 2)
            # Booting is one long step with nothing in the database to follow before its end.
            run_id = self.wait_for_run("weekly-payouts", "running", attempt=1, stall=BOOT_STALL_SECONDS)
            # One step more: the running job reaching its write. The payout run's statement,
            # not one of the every-minute senders' (they read the restaurants too, and may be
            # the first to queue behind the lock).
            backend = self.db.wait_blocked_by(holder, timeout=STALL_SECONDS, statement_mentions="payouts_payout")
            fence = self.db.scalar("SELECT fence FROM job_runs WHERE id = %s", [run_id])
            yield PinnedRun(run_id=run_id, fence=fence, backend=backend)

    def run_worker(self, run_id: int) -> Process:
        """The fleet process executing ``run_id`` (job_runs.worker is 'host:pid' of a django-q2 worker)."""
        worker = self.db.scalar("SELECT worker FROM job_runs WHERE id = %s", [run_id])
        owner = self.fleet.owner_of(int(worker.rsplit(":", 1)[1]))
        assert owner is not None, f"run {run_id} runs on {worker}, which is not a process of this scenario"
        return owner


# --- Assertions that several scenarios share -----------------------------------------------


def expected_cron_ticks(db: ScenarioDatabase) -> dict[str, list[datetime]]:
    """Every tick each cron job should have been claimed for: after the job's first
    registration, up to the newest completed scheduler pass (the pass that stamped it
    claimed every tick due at that instant)."""
    last_pass = db.scalar("SELECT max(last_pass_at) FROM job_scheduler_nodes")
    schedules = db.rows("SELECT job_name, cron, timezone, first_seen_at FROM job_schedules WHERE kind = 'cron'")
    return {name: cron.ticks_between(expr, zone, first_seen, last_pass) for name, expr, zone, first_seen in schedules}


def claimed_cron_ticks(db: ScenarioDatabase) -> dict[str, list[datetime]]:
    claimed: dict[str, list[datetime]] = {}
    for name, scheduled_for in db.rows(
        "SELECT job_name, scheduled_for FROM job_runs WHERE trigger = 'cron' ORDER BY job_name, scheduled_for"
    ):
        claimed.setdefault(name, []).append(scheduled_for)
    return claimed


def succeeded_ticks(db: ScenarioDatabase, job_name: str) -> list[datetime]:
    return [
        row[0]
        for row in db.rows(
            "SELECT scheduled_for FROM job_runs WHERE job_name = %s AND status = 'succeeded' ORDER BY 1", [job_name]
        )
    ]


def unjustified_skips(db: ScenarioDatabase, job_name: str) -> list[tuple[int, str]]:
    """The skipped runs of ``job_name`` that its policies did not have to skip, as
    (run id, reason). A bound on how many ticks a loaded machine skips would be a guess;
    what the design promises is that every skip has its cause in the record:

    - ``overlap``: the skip names the run it waited behind, a run of the same job whose
      ``started`` event was written before the ``skipped`` one (event ids follow the
      order of the writes, and the skip read the holder's committed start);
    - ``coalesced``: a later tick of the job was already due by the claiming server's
      clock (``created_at`` is that server's ``now``);
    - anything else (``missed_deadline`` for a job without a deadline, ``paused``) is
      never justified here.
    """
    return [
        (int(run_id), str(reason))
        for run_id, reason in db.rows(
            """
            SELECT r.id, r.skip_reason
              FROM job_runs r
             WHERE r.job_name = %(job)s AND r.status = 'skipped'
               AND NOT (r.skip_reason = 'overlap' AND EXISTS (
                        SELECT 1
                          FROM job_run_events skip
                          JOIN job_run_events start ON start.kind = 'started' AND start.id < skip.id
                          JOIN job_runs holder ON holder.id = start.run_id
                         WHERE skip.run_id = r.id AND skip.kind = 'skipped'
                           AND holder.job_name = r.job_name AND holder.id <> r.id
                           AND skip.message LIKE '%%run ' || holder.id || ' (%%'))
               AND NOT (r.skip_reason = 'coalesced' AND EXISTS (
                        SELECT 1 FROM job_runs later
                         WHERE later.job_name = r.job_name
                           AND later.scheduled_for > r.scheduled_for AND later.scheduled_for <= r.created_at))
             ORDER BY r.id
            """,
            {"job": job_name},
        )
    ]


def charges_per_tick(db: ScenarioDatabase, job_name: str) -> dict[datetime, int]:
    return db.counts(
        "SELECT scheduled_for, count(*) FROM simulation_probe_charges WHERE job_name = %s GROUP BY scheduled_for",
        [job_name],
    )


@contextmanager
def migrated_template(server: PostgresServer) -> Iterator[str]:
    """A database on ``server`` migrated once (its name, pid-suffixed), dropped afterwards;
    scenarios clone it."""
    name = f"tiffin_scn_template_{os.getpid()}"
    server.create_database(name)
    try:
        environment = {**os.environ, "DATABASE_URL": server.url(name)}
        migrate = manage_run(environment, "migrate", "--noinput", "--verbosity", "0")
        assert migrate.returncode == 0, migrate.stderr
        yield name
    finally:
        server.drop_database(name)


@contextmanager
def open_scenario(*, server: PostgresServer, template: str, label: str, log_dir: Path) -> Iterator[Scenario]:
    """A fresh database cloned from ``template`` and an empty fleet. However the block
    ends, every process is stopped (SIGTERM, then SIGKILL to its group) and the database
    dropped; when an exception escapes it, the tail of each process's log is printed."""
    short = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")[:30]
    db = ScenarioDatabase(server=server, name=f"tiffin_scn_{short}_{os.getpid()}")
    server.create_database(db.name, template=template)
    fleet = Fleet(environment={"DATABASE_URL": db.url, **PROCESS_ENVIRONMENT}, log_dir=log_dir, grace=8.0)
    try:
        yield Scenario(db=db, fleet=fleet)
    except BaseException:
        print(fleet.log_tails(lines=25))
        raise
    finally:
        fleet.stop_all()
        server.drop_database(db.name)
