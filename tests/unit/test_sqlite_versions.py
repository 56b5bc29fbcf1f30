"""SQLite's versions sit apart from PostgreSQL's main path, under the same names: an app's
``queries_sqlite`` beside its ``queries`` (``tiffin.db.queries_for_backend`` picks the module), and
``scheduling.sql_sqlite`` beside ``scheduling.sql`` (each original names its version with
``tiffin.db.on_sqlite``). Each must have a PostgreSQL original of its name."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from payouts import queries as payout_queries
from payouts import queries_sqlite as payout_queries_sqlite
from scheduling import queries, queries_sqlite, sql, sql_sqlite


def _statements(module: ModuleType) -> set[str]:
    return {name for name, value in vars(module).items() if name.isupper() and isinstance(value, str)}


@pytest.mark.parametrize(
    ("postgresql", "sqlite"),
    [(queries, queries_sqlite), (payout_queries, payout_queries_sqlite)],
    ids=["engine", "payouts"],
)
def test_every_sqlite_statement_has_a_postgresql_original_of_its_name(postgresql, sqlite):
    assert _statements(sqlite)
    assert _statements(sqlite) <= _statements(postgresql)


def test_every_sqlite_function_replaces_an_original_with_its_signature():
    versions = [
        value
        for name, value in vars(sql_sqlite).items()
        if inspect.isfunction(value) and value.__module__ == sql_sqlite.__name__ and not name.startswith("_")
    ]
    assert len(versions) >= 6
    for version in versions:
        original = getattr(sql, version.__name__)
        assert hasattr(original, "__wrapped__"), f"sql.{version.__name__} is not decorated with on_sqlite"
        assert inspect.signature(original) == inspect.signature(version), version.__name__
