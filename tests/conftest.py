"""Shared fixtures. The database is whatever DATABASE_URL names (PostgreSQL or SQLite);
tests marked ``postgres`` are deselected on SQLite by the Makefile and skipped here too."""

from __future__ import annotations

import signal
from collections.abc import Callable, Generator, Iterator
from datetime import datetime
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from support.processes import sigterm_exits


def pytest_report_header(config: pytest.Config) -> str:
    db = settings.DATABASES["default"]
    return f"database: {db['ENGINE'].rsplit('.', 1)[-1]} ({db['NAME']})"


def _session_ends(signum: int) -> BaseException:
    return pytest.exit.Exception(f"{signal.Signals(signum).name} received", returncode=128 + signum)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, object, object]:
    """SIGTERM or SIGHUP to pytest (a CI timeout, a supervisor, ``kill``, a closed terminal)
    ends the session the way Ctrl-C does, so the fixtures' finalizers stop the processes
    the tests started and drop their databases; pytest exits with 128 + the signal's
    number. Their default ends the interpreter at once and leaves all that behind.
    Wrapping the whole command covers the session's own teardown (templates, servers)."""
    with sigterm_exits((signal.SIGTERM, signal.SIGHUP), exception=_session_ends):
        return (yield)


def _ledger_wipe_allowed(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """Django empties the tables after each transactional test with TRUNCATE (its flush),
    which the ledger's guard (payouts/0010_ledger_truncate_guard) refuses unless the
    session allows it; this process's connections do. Processes the tests start do not."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET tiffin.ledger_wipe = 'on'")


connection_created.connect(_ledger_wipe_allowed, dispatch_uid="tests.ledger_wipe_allowed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL is not postgres://)")
    for item in items:
        if "postgres" in item.keywords or "scenario" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(f"ran on: {connection.vendor}")


# --- Domain fixtures: restaurants and orders, made through the services -----------------


@pytest.fixture
def restaurant_factory(db: None) -> Any:
    """Make a restaurant through ``orders.services.restaurant_create``; any field may be given."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from orders.services import restaurant_create

    made = 0

    def make(**fields: Any) -> Any:
        nonlocal made
        made += 1
        values: dict[str, Any] = {
            "name": f"Restaurant {made}",
            "timezone": "Asia/Kolkata",
            "commission_rate": Decimal("0.15"),
            "onboarded_at": datetime(2026, 1, 5, tzinfo=UTC),
        }
        values.update(fields)
        return restaurant_create(**values)

    return make


@pytest.fixture
def restaurant(restaurant_factory: Any) -> Any:
    return restaurant_factory()


@pytest.fixture
def order_factory(restaurant_factory: Any) -> Any:
    """Make an order in a given status by walking the legal transitions, each one minute
    after the last, starting at ``placed_at``."""
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    from orders import services
    from orders.models import OrderStatus
    from tests.database_clock import database_clock_at

    steps: dict[OrderStatus, list[Any]] = {
        OrderStatus.PLACED: [],
        OrderStatus.ACCEPTED: [services.order_accept],
        OrderStatus.DELIVERED: [services.order_accept, services.order_deliver],
        OrderStatus.REJECTED: [services.order_reject],
        OrderStatus.CANCELLED: [lambda **kw: services.order_cancel(reason="customer changed their mind", **kw)],
    }

    def make(
        status: str = OrderStatus.PLACED,
        *,
        restaurant: Any = None,
        total: Decimal = Decimal("24.50"),
        placed_at: datetime = datetime(2026, 3, 2, 12, 0, tzinfo=UTC),
    ) -> Any:
        order = services.order_place(
            restaurant=restaurant or restaurant_factory(), customer_ref="cust-00001", total=total, now=placed_at
        )
        for minutes, step in enumerate(steps[OrderStatus(status)], start=1):
            at = placed_at + timedelta(minutes=minutes)
            with database_clock_at(at):  # order_accept's deadline is the database's clock's
                order = step(order_id=order.pk, now=at)
        return order

    return make


@pytest.fixture
def admin_pages(settings: Any) -> None:
    """Serve the admin to the test client: plain HTTP (production settings redirect to
    HTTPS) and static files without collectstatic's manifest."""
    settings.SECURE_SSL_REDIRECT = False
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


# --- The clocks, the database's included ------------------------------------------------


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``clocks(at, skew=s)``: from now on the database's clock reads ``at`` (and runs on
    at real speed), and this process's ``tiffin.clock`` reads ``at + s``: the accelerated
    clock of ``simulate`` at speed 1. For code that asks the database for the time
    (``tiffin.clock.DatabaseNow``), which ``time_machine`` cannot move; do not combine the
    two (under ``time_machine`` this clock's reading is meaningless)."""
    import time

    from tiffin import clock

    def set_clocks(at: datetime, *, skew: float = 0.0) -> None:
        monkeypatch.setenv("TIFFIN_CLOCK_START", at.isoformat())
        monkeypatch.setenv("TIFFIN_CLOCK_ANCHOR", repr(time.time()))
        monkeypatch.setenv("TIFFIN_CLOCK_SPEED", "1")
        monkeypatch.setenv("TIFFIN_CLOCK_SKEW", repr(skew))
        clock.reset()

    yield set_clocks
    clock.reset()
