"""Shared fixtures. The database is whatever DATABASE_URL names (PostgreSQL or SQLite);
tests marked ``postgres`` are deselected on SQLite by the Makefile and skipped here too."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection


def pytest_report_header(config: pytest.Config) -> str:
    db = settings.DATABASES["default"]
    return f"database: {db['ENGINE'].rsplit('.', 1)[-1]} ({db['NAME']})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL is not postgres://)")
    for item in items:
        if "postgres" in item.keywords or "scenario" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    terminalreporter.write_line(f"ran on: {connection.vendor}")
