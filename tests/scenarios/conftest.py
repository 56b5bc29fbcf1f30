"""Fixtures for the failure scenarios: the PostgreSQL server, a migrated template
database (once per session), and per scenario a fresh database and a fleet of processes
that is stopped, and whose database is dropped, however the scenario ends."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from simulation.processes import PROJECT_DIR
from tests.scenarios.harness import PostgresServer, Scenario, open_scenario


@pytest.fixture(scope="session")
def pg_server() -> PostgresServer:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the scenarios need PostgreSQL (DATABASE_URL is not postgres://)")
    return PostgresServer(
        host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 5432), user=db["USER"], password=db["PASSWORD"]
    )


@pytest.fixture(scope="session")
def scenario_template(pg_server: PostgresServer) -> Iterator[str]:
    """A database migrated once; every scenario starts from a copy of it."""
    name = f"tiffin_scn_template_{os.getpid()}"
    pg_server.create_database(name)
    try:
        env = {**os.environ, "DATABASE_URL": pg_server.url(name)}
        migrate = subprocess.run(
            [sys.executable, str(PROJECT_DIR / "manage.py"), "migrate", "--noinput", "--verbosity", "0"],
            env=env,
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert migrate.returncode == 0, migrate.stderr
        yield name
    finally:
        pg_server.drop_database(name)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def scenario(
    request: pytest.FixtureRequest, pg_server: PostgresServer, scenario_template: str, tmp_path: Path
) -> Iterator[Scenario]:
    """A fresh database and an empty fleet (see ``open_scenario``); the logs' tails are
    printed when the scenario's assertions failed."""
    with open_scenario(
        server=pg_server, template=scenario_template, label=request.node.name, log_dir=tmp_path / "logs"
    ) as scenario:
        yield scenario
        if request.node.stash.get(_CALL_FAILED, False):
            print(scenario.fleet.log_tails(lines=25))
