"""The usual first answers to "run this job once, on many servers", written the way a
team would write them, for ``simulate --strategy`` and ``--compare``.

Every strategy runs the same probe: once a minute it does its work (instant, unless the
plan made that tick a long run) and then charges for the tick, unguarded: a second
execution of a tick is a second charge. What differs is what decides to run it:

1. ``every-server``: the crontab baked into the server image; every server runs it.
2. ``special-server``: the same crontab on server 1 only.
3. ``redis-lock``: every server's cron line first takes ``SET <ns>:lock:<job> <token> NX
   PX <ttl>`` on Redis and skips the tick if that fails; the holder releases it with a
   compare-and-delete (a Lua script), so it never deletes a lock someone else took.
4. ``advisory-lock``: every server first takes the session-level
   ``pg_try_advisory_lock`` and skips the tick if that fails; ``pg_advisory_unlock``
   after the run. Behind a transaction-mode pooler the lock is taken on whichever server
   connection that one statement got, and stays there.
5. ``claim``: Tiffin itself (``simulation.strategy_jobs``): the ``job_runs`` claim, the
   queue and the fence.

The first four run in ``manage.py strategy_cron``, one process per server: a loop that
sleeps to the next tick by its own clock and starts the tick's execution in a thread, as
cron forks a process, so a long run does not hold the next tick back. A process that was
frozen fires, as soon as it wakes, each tick that came due meanwhile (a loop over the
schedule's ticks does; cron itself would run only the current minute). A restarted one
starts from the next tick: what came due while it was down is gone. Given ``--until``
(simulate gives the window's end) it exits once it has fired the ticks before it.
"""

from __future__ import annotations

import os
import threading
import uuid
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from django.conf import settings
from django.db import connection, connections

from scheduling import cron
from simulation.models import StrategyRun
from tiffin import clock

if TYPE_CHECKING:
    # redis is a development requirement (requirements-dev.txt): imported only when the
    # redis-lock strategy asks for a client.
    import redis

PROBE_JOB = "strategy-probe"
PROBE_CRON = "* * * * *"
# The lease every strategy that has one gets, in simulated seconds: the Redis lock's TTL,
# and the claim's heartbeat timeout. A team picks it well above a normal run (instant).
LEASE_SECONDS = 90
HEARTBEAT_SECONDS = 15
# Ticks whose work takes longer than a normal run: "2027-03-07T20:05:00+00:00=150,...".
LONG_RUNS_VARIABLE = "TIFFIN_PROBE_LONG_RUNS"
# What keeps one simulation's Redis keys apart from another's on a shared Redis.
NAMESPACE_VARIABLE = "TIFFIN_STRATEGY_NAMESPACE"


class Strategy(StrEnum):
    EVERY_SERVER = "every-server"
    SPECIAL_SERVER = "special-server"
    REDIS_LOCK = "redis-lock"
    ADVISORY_LOCK = "advisory-lock"
    CLAIM = "claim"

    @property
    def needs_postgres(self) -> bool:
        return self == Strategy.ADVISORY_LOCK

    @property
    def needs_redis(self) -> bool:
        return self == Strategy.REDIS_LOCK


# --- The probe's work, the same for every strategy -------------------------------------


def long_runs_text(long_runs: dict[datetime, float]) -> str:
    return ",".join(f"{tick.isoformat()}={seconds:g}" for tick, seconds in sorted(long_runs.items()))


def long_run_seconds(tick: datetime) -> float:
    """How long the work of ``tick`` lasts (simulated seconds): 0 unless the plan says so."""
    for item in filter(None, os.environ.get(LONG_RUNS_VARIABLE, "").split(",")):
        instant, _, seconds = item.rpartition("=")
        if datetime.fromisoformat(instant) == tick:
            return float(seconds)
    return 0.0


def probe_work(*, tick: datetime, heartbeat: Callable[[], None]) -> None:
    """Do the tick's work: at once, or for its long-run length, heartbeating meanwhile."""
    finish_at = clock.now() + timedelta(seconds=long_run_seconds(tick))
    while (left := (finish_at - clock.now()).total_seconds()) > 0:
        heartbeat()
        clock.sleep(min(left, HEARTBEAT_SECONDS))


def execution_start(*, strategy: Strategy, tick: datetime, server: str) -> int:
    run = StrategyRun.objects.create(strategy=strategy, scheduled_for=tick, server=server, started_at=clock.now())
    return run.pk


def execution_charge(*, execution_id: int, stale: bool) -> None:
    """The business write: charge for the execution's tick (no guard: see the module doc)."""
    now = clock.now()
    StrategyRun.objects.filter(id=execution_id).update(charged_at=now, finished_at=now, stale=stale)


# --- The locks ----------------------------------------------------------------------


class Lock(Protocol):
    def acquire(self) -> bool: ...

    def still_held(self) -> bool | None:
        """Measured just before the charge, never acted on; None: there is no lock."""

    def release(self) -> None: ...


class NoLock:
    def acquire(self) -> bool:
        return True

    def still_held(self) -> bool | None:
        return None

    def release(self) -> None:
        pass


# Delete the key only if it still holds our token: atomic in Redis, so a holder whose TTL
# lapsed cannot delete the lock the next server took.
_COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


class RedisLock:
    """``SET key token NX PX ttl``; released by compare-and-delete. The TTL is simulated
    seconds, converted to the real milliseconds Redis counts."""

    def __init__(self, client: redis.Redis, *, key: str, server: str, ttl_seconds: float) -> None:
        self.client = client
        self.key = key
        self.token = f"{server}/{uuid.uuid4().hex[:12]}"
        self.ttl_ms = max(1, round(clock.real_seconds(ttl_seconds) * 1000))

    def acquire(self) -> bool:
        return bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def still_held(self) -> bool | None:
        held = self.client.get(self.key)
        return held in (self.token, self.token.encode())

    def release(self) -> None:
        self.client.eval(_COMPARE_AND_DELETE, 1, self.key, self.token)


# The session-level advisory lock, keyed by the job (one bigint: crc32 of its name).
_TRY_LOCK = "SELECT pg_try_advisory_lock(%s)"
_UNLOCK = "SELECT pg_advisory_unlock(%s)"
# Whether this backend holds that lock. A bigint key shows in pg_locks as classid (high
# 32 bits), objid (low 32 bits) and objsubid 1.
_HOLDS = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND classid = 0 AND objid = %s AND objsubid = 1 AND granted)"
)


class AdvisoryLock:
    """``pg_try_advisory_lock`` on this thread's connection, ``pg_advisory_unlock`` after.
    Each statement is its own transaction (autocommit), as a team's would be."""

    def __init__(self, *, job_name: str) -> None:
        self.key = zlib.crc32(job_name.encode())

    def _ask(self, statement: str) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(statement, [self.key])
            row = cursor.fetchone()
        return bool(row and row[0])

    def acquire(self) -> bool:
        return self._ask(_TRY_LOCK)

    def still_held(self) -> bool | None:
        return self._ask(_HOLDS)

    def release(self) -> None:
        self._ask(_UNLOCK)  # False (and a warning) when this backend does not hold it


def redis_client() -> redis.Redis:
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)


def redis_problem() -> str:
    """Why the Redis at REDIS_URL cannot be used, or '' when it answers."""
    import redis

    try:
        redis_client().ping()
    except redis.RedisError as error:
        return f"Redis at {settings.REDIS_URL} does not answer ({error})"
    return ""


def lock_for(strategy: Strategy, *, server: str, client: redis.Redis | None) -> Lock:
    if strategy == Strategy.REDIS_LOCK:
        if client is None:
            raise ValueError("the redis-lock strategy needs a Redis client")
        key = f"{os.environ.get(NAMESPACE_VARIABLE, 'tiffin')}:lock:{PROBE_JOB}"
        return RedisLock(client, key=key, server=server, ttl_seconds=LEASE_SECONDS)
    if strategy == Strategy.ADVISORY_LOCK:
        return AdvisoryLock(job_name=PROBE_JOB)
    return NoLock()


# --- The cron line on one server --------------------------------------------------------


def cron_execute(strategy: Strategy, *, tick: datetime, server: str, client: redis.Redis | None) -> bool:
    """One server's cron line firing for ``tick``: take the lock (or skip the tick), do
    the work, charge, release. Returns whether it ran."""
    lock = lock_for(strategy, server=server, client=client)
    try:
        if not lock.acquire():
            return False
        try:
            execution_id = execution_start(strategy=strategy, tick=tick, server=server)
            probe_work(tick=tick, heartbeat=lambda: None)
            execution_charge(execution_id=execution_id, stale=lock.still_held() is False)
        finally:
            lock.release()
        return True
    finally:
        connection.close()  # this thread's connection (and a direct session's locks) end here


def cron_loop(
    strategy: Strategy, *, server: str, stop: threading.Event, since: datetime, until: datetime | None = None
) -> None:
    """Fire every tick from ``since`` on (those already due at once), each in its own
    thread, until ``stop`` or up to the last tick before ``until``; then wait for the
    executions started."""
    client = redis_client() if strategy.needs_redis else None
    firing: list[threading.Thread] = []
    after = since - timedelta(microseconds=1)
    while not stop.is_set():
        tick = cron.next_ticks(PROBE_CRON, "UTC", after, 1)[0]
        if until is not None and tick >= until:
            break
        while not stop.is_set() and (left := (tick - clock.now()).total_seconds()) > 0:
            stop.wait(clock.real_seconds(left))
        if stop.is_set():
            break
        thread = threading.Thread(
            target=cron_execute, args=(strategy,), kwargs={"tick": tick, "server": server, "client": client}
        )
        thread.start()
        firing = [*(t for t in firing if t.is_alive()), thread]
        after = tick
    for thread in firing:
        thread.join(timeout=30)
    connections.close_all()
