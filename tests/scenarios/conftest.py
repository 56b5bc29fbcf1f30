"""Fixtures for the failure scenarios: the PostgreSQL server, a migrated template
database (once per session), and per scenario a fresh database and a fleet of processes
that is stopped, and whose database is dropped, however the scenario ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.scenarios.cluster import PrivateScenario, throwaway_cluster
from tests.scenarios.harness import PostgresServer, Scenario, migrated_template, open_scenario


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
    with migrated_template(pg_server) as name:
        yield name


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
    yield from _scenario_on(request, pg_server, scenario_template, tmp_path)


@pytest.fixture
def private_scenario(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PrivateScenario]:
    """A scenario on a PostgreSQL server of its own (``tests/scenarios/cluster.py``), for
    the one that restarts its server: the cluster, its template and the scenario's
    database are all gone afterwards, and the machine's server is never touched."""
    with throwaway_cluster() as cluster, migrated_template(cluster.server) as template:
        for scenario in _scenario_on(request, cluster.server, template, tmp_path):
            yield PrivateScenario(scenario=scenario, cluster=cluster)
            if request.node.stash.get(_CALL_FAILED, False):
                print(f"===== private PostgreSQL\n{cluster.log_tail()}")


def _scenario_on(
    request: pytest.FixtureRequest, server: PostgresServer, template: str, tmp_path: Path
) -> Iterator[Scenario]:
    with open_scenario(
        server=server, template=template, label=request.node.name, log_dir=tmp_path / "logs"
    ) as scenario:
        yield scenario
        if request.node.stash.get(_CALL_FAILED, False):
            print(scenario.fleet.log_tails(lines=25))
