"""Helpers for tests that race two PostgreSQL connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction


def wait_until_blocked(waiting: int = 1, timeout: float = 10.0) -> None:
    """Wait until ``waiting`` other backends of this database wait on a lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            row = cursor.fetchone()
            if row is not None and row[0] >= waiting:
                return
        time.sleep(0.01)
    raise AssertionError("no backend started waiting for the lock")


def in_own_connection(work: Callable[[], object]) -> Callable[[], None]:
    """``work`` for a thread of its own: it closes the thread's connection however it ends."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    return run


def race_behind_lock(
    *, holder: Callable[[], object], holding: threading.Event, waiter: Callable[[], object], release: threading.Event
) -> None:
    """Pin ``waiter`` behind the lock ``holder`` takes, then let go:

    1. Start ``holder`` in a thread and wait until it sets ``holding`` (it holds the lock
       and then waits for ``release``).
    2. Start ``waiter`` in another and wait until PostgreSQL shows it blocked on a lock.
    3. Set ``release`` and wait for both threads to finish.
    """
    first, second = (
        threading.Thread(target=in_own_connection(holder)),
        threading.Thread(target=in_own_connection(waiter)),
    )
    first.start()
    assert holding.wait(10)
    second.start()
    wait_until_blocked()
    release.set()
    first.join()
    second.join()


@contextmanager
def held_in_thread(work: Callable[[], object], *, timeout: float = 10.0) -> Iterator[None]:
    """Run ``work`` in a transaction on a thread's own connection and keep that transaction
    open (its locks held) for the block; it ends, and the thread with it, when the block
    does, however the block ends."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            work()
            holding.set()
            release.wait(timeout * 3)

    thread = threading.Thread(target=in_own_connection(hold))
    thread.start()
    try:
        assert holding.wait(timeout), "the holding transaction did not start"
        yield
    finally:
        release.set()
        thread.join(timeout * 3)


def in_thread(
    work: Callable[[], Any], *, hold: threading.Event | None = None
) -> tuple[threading.Thread, threading.Event, list[Any]]:
    """Run ``work()`` in a transaction on a connection of its own; with ``hold``, keep the
    transaction (and its locks) open until it is set. Returns the thread, a 'has run'
    event and what ``work`` returned or raised."""
    done, outcome = threading.Event(), []

    def run() -> None:
        try:
            with transaction.atomic():
                outcome.append(work())
                done.set()
                if hold is not None:
                    hold.wait(timeout=30)
        except Exception as error:
            outcome.append(error)
        finally:
            done.set()
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done, outcome


def race_in_threads(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[list[Any], list[Any]]:
    """``first`` in a transaction held open once it has run (``in_thread``), then ``second``
    on another connection; once PostgreSQL shows ``second`` waiting on a lock, ``first``
    commits. Returns what each returned or raised, once both threads are done."""
    release = threading.Event()
    holder, ran, first_outcome = in_thread(first, hold=release)
    assert ran.wait(timeout=30)
    waiter, _, second_outcome = in_thread(second)
    wait_until_blocked()
    release.set()
    holder.join(timeout=30)
    waiter.join(timeout=30)
    return first_outcome, second_outcome
