"""Issue 30, hole 1: a reset that pays twice.

The deploy migrates and runs with one DATABASE_URL whose role owns the tables, so "do not
grant TRUNCATE" protects nothing. Here a database is made exactly so (a login role, not a
superuser, owning the database; ``migrate`` and every command run as it) and the real
commands run as subprocesses:

- with production settings (DEBUG=0, a SECRET_KEY) ``seed_demo --reset`` and
  ``simulate --reset`` refuse a database that holds payouts: non-zero exit, a message
  naming what they would destroy, and not one row changed; the next catch-up pays nothing
  again and the independent ledger check holds;
- the one permitted wipe (DEBUG=1 and ``seed_demo --reset --delete-payouts``) deletes the
  payouts with the orders they cover: after it, and after the next catch-up, every
  delivered order is paid exactly once, amounts computed from the orders.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from support import databases
from tests.scenarios.harness import HANG_GUARD_SECONDS, PostgresServer, ScenarioDatabase, manage_run
from tests.scenarios.ledger import assert_ledger_correct

# Not a scenario (no fleet; it runs in the PostgreSQL pass), but its commands run through
# ``manage_run``, which nothing else bounds.
pytestmark = pytest.mark.timeout(HANG_GUARD_SECONDS)

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
PRODUCTION = {"DEBUG": "0", "SECRET_KEY": "reset-guard-test-key-" + "x" * 40, "LOG_LEVEL": "WARNING"}
DEVELOPMENT = {"DEBUG": "1", "LOG_LEVEL": "WARNING"}

# What a reset would destroy, summed so that any change shows.
SNAPSHOT = """
SELECT (SELECT count(*) FROM orders_restaurant), (SELECT count(*) FROM orders_order),
       (SELECT coalesce(sum(total), 0) FROM orders_order), (SELECT count(*) FROM payouts_payout),
       (SELECT coalesce(sum(net), 0) FROM payouts_payout), (SELECT count(*) FROM carts_cart),
       (SELECT count(*) FROM job_runs), (SELECT count(*) FROM job_schedules)
"""


@dataclass
class DeployDatabase(ScenarioDatabase):
    """A database owned by a login role that is not a superuser: the deploy's only role."""

    role: str = ""

    @property
    def url(self) -> str:
        server = self.server
        return f"postgres://{self.role}@{server.host}:{server.port}/{self.name}"

    def manage(self, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("TIFFIN_CLOCK_")}
        environment.update(DATABASE_URL=self.url, DJANGO_SETTINGS_MODULE="tiffin.settings", **env)
        return manage_run(environment, *args)

    def execute_as_owner(self, statement: str) -> None:
        """Run ``statement`` on a connection of the deploy's role (the tables' owner)."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(statement.encode())

    def snapshot(self) -> tuple[Any, ...]:
        return tuple(self.rows(SNAPSHOT)[0])


@pytest.fixture
def deploy_db(pg_server: PostgresServer) -> Iterator[DeployDatabase]:
    """A fresh database owned by its own role, migrated by that role; both dropped after."""
    suffix = os.getpid()
    db = DeployDatabase(server=pg_server, name=f"tiffin_reset_deploy_{suffix}", role=f"tiffin_reset_app_{suffix}")
    role = sql.Identifier(db.role)
    with pg_server.connect() as conn:
        databases.database_drop(conn, db.name)
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(role))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").format(role))
        databases.database_create(conn, db.name, owner=db.role)
    try:
        migrated = db.manage("migrate", "--noinput", "--verbosity", "0", env=PRODUCTION)
        assert migrated.returncode == 0, migrated.stderr
        yield db
    finally:
        with pg_server.connect() as conn:
            databases.database_drop(conn, db.name)
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(role))


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def _paid(db: DeployDatabase) -> int:
    """Seed (an empty database: no --reset) and pay every finished week, as production would."""
    _ok(db.manage("seed_demo", "--restaurants", "3", "--weeks", "2", "--now", NOW.isoformat(), env=PRODUCTION))
    _ok(db.manage("catch_up_payouts", "--as-of", NOW.isoformat(), env=PRODUCTION))
    return assert_ledger_correct(db, as_of=NOW)


def test_with_production_settings_every_reset_refuses_a_database_that_holds_payouts(deploy_db):
    payouts = _paid(deploy_db)
    assert payouts >= 6
    before = deploy_db.snapshot()
    for command in (
        ("seed_demo", "--reset", "--now", NOW.isoformat()),
        ("seed_demo", "--reset", "--delete-payouts", "--now", NOW.isoformat()),
        ("simulate", "--reset", "--duration", "10m"),
    ):
        refused = deploy_db.manage(*command, env=PRODUCTION)
        assert refused.returncode != 0, f"{command} exited 0: {refused.stdout}"
        assert f"{payouts} payouts" in refused.stderr, refused.stderr  # it names what it would destroy
        assert "nothing was deleted" in refused.stderr
        assert deploy_db.snapshot() == before, f"{command} changed the database"
    # The week is not paid again: the catch-up finds nothing to pay, the ledger is as it was.
    # Nor does any other path empty the ledger, from the owner's own connection: Django's
    # flush, or a TRUNCATE typed by hand (the statement guard of payouts/0010).
    flushed = deploy_db.manage("flush", "--noinput", env=PRODUCTION)
    assert flushed.returncode != 0 and "couldn't be flushed" in flushed.stderr  # Django hides the cause
    # CASCADE: so no foreign key into the table refuses the TRUNCATE before the guard is
    # asked; the guard alone stands in the way.
    for table in ("payouts_payout CASCADE", "orders_order", "orders_commissionratechange", "orders_restaurant CASCADE"):
        with pytest.raises(psycopg.errors.RestrictViolation, match=r"TRUNCATE of \w+ refused"):
            deploy_db.execute_as_owner(f"TRUNCATE {table}")
    assert deploy_db.snapshot() == before
    later = NOW + timedelta(hours=1)  # no week ends between: a new claim that must pay nothing
    _ok(deploy_db.manage("catch_up_payouts", "--as-of", later.isoformat(), env=PRODUCTION))
    assert assert_ledger_correct(deploy_db, as_of=later) == payouts
    assert deploy_db.snapshot()[:6] == before[:6]


def test_simulate_reset_refuses_payouts_with_development_settings_too(deploy_db):
    """simulate --reset kept the orders and wiped their payouts: never, in any settings."""
    payouts = _paid(deploy_db)
    before = deploy_db.snapshot()
    refused = deploy_db.manage("simulate", "--reset", "--duration", "10m", env=DEVELOPMENT)
    assert refused.returncode != 0
    assert f"{payouts} payouts" in refused.stderr and "seed_demo --reset --delete-payouts" in refused.stderr
    assert deploy_db.snapshot() == before
    # A development reset without the explicit opt-in is refused too, naming the counts.
    refused = deploy_db.manage("seed_demo", "--reset", "--now", NOW.isoformat(), env=DEVELOPMENT)
    assert refused.returncode != 0 and "--delete-payouts" in refused.stderr
    assert deploy_db.snapshot() == before


def test_the_permitted_development_reset_leaves_no_paid_order_looking_unpaid(deploy_db):
    _paid(deploy_db)
    done = _ok(
        deploy_db.manage(
            "seed_demo", "--reset", "--delete-payouts", "--seed", "9", "--restaurants", "3", "--weeks", "2",
            "--now", NOW.isoformat(), env=DEVELOPMENT,
        )
    )  # fmt: skip
    assert "Reset: deleted" in done
    # The payouts went with the orders they covered: none of the old orders is left.
    assert deploy_db.scalar("SELECT count(*) FROM payouts_payout") == 0
    assert deploy_db.scalar("SELECT count(*) FROM orders_order WHERE delivered_at IS NOT NULL") > 0
    later = NOW + timedelta(hours=1)  # the claim as of NOW is the engine's memory: the reset kept it
    _ok(deploy_db.manage("catch_up_payouts", "--as-of", later.isoformat(), env=PRODUCTION))
    assert assert_ledger_correct(deploy_db, as_of=later) >= 6
    # And simulate --reset, on the database with those payouts, still refuses.
    assert deploy_db.manage("simulate", "--reset", "--duration", "10m", env=DEVELOPMENT).returncode != 0
