"""A measured optimisation: read PostgreSQL timestamps with psycopg's compiled loader again.

Django (5.2, psycopg 3) registers its own ``timestamptz`` loader on every connection: a
Python subclass of psycopg's pure-Python ``TimestamptzLoader`` that parses the text and
then replaces its tzinfo with the connection's zone. psycopg's compiled loader, which the
``psycopg[binary]`` package provides, is never used for a timestamp Django reads
(Django ticket #36960, psycopg issue #1273), and a worker reads six per delayed run it
starts. Measured with ``bench.profile_delayed``: the worker's execute step 0.705 -> 0.431 s
of CPU per 1,000 orders (docs/benchmark-history.md). Without this module the project
behaves the same, only slower: Django's own loader is the plain path.

When the two loaders give the same value, ``install`` puts back the compiled one behind a
subclass of Django's (which Django's own ``create_cursor`` compares by its ``timezone``):

- Django's zone for the connection is UTC (``USE_TZ`` on, no ``TIME_ZONE`` in the
  database settings: this project's settings), so Django replaces the tzinfo with
  ``datetime.timezone.utc``;
- the session's ``TimeZone`` is UTC, which Django sets when it connects, so the compiled
  loader returns the same instant with that same ``datetime.timezone.utc``.

Each result set's loader checks the second condition again (a session that ran ``SET
TIME ZONE`` falls back to Django's parsing); with either condition false, nothing changes.
"""

from __future__ import annotations

import functools
from datetime import UTC
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper


def install(*, connection: BaseDatabaseWrapper, **_: Any) -> None:
    """``connection_created`` receiver: register the UTC loader on a new PostgreSQL
    connection when Django reads its timestamps as UTC."""
    # seam: the loader is psycopg's, so PostgreSQL's connections only
    if connection.vendor != "postgresql" or connection.timezone is not UTC:
        return
    loader = _utc_loader()
    if loader is not None:
        connection.connection.adapters.register_loader("timestamptz", loader)


@functools.cache
def _utc_loader() -> type | None:
    """The loader class (built once), or None without psycopg 3's compiled loader."""
    try:
        import psycopg
        from django.db.backends.postgresql.psycopg_any import BaseTzLoader  # type: ignore[import-untyped]
        from psycopg.adapt import AdaptersMap
        from psycopg.postgres import types
        from psycopg.pq import Format
        from psycopg.types.datetime import TimestamptzLoader
    except ImportError:  # psycopg2, or no PostgreSQL driver at all
        return None
    # psycopg's default map holds the compiled class where it has one (its public lookup).
    compiled = AdaptersMap(psycopg.adapters).get_loader(types["timestamptz"].oid, Format.TEXT)
    if compiled is None or compiled is TimestamptzLoader:
        return None  # the pure-Python implementation: nothing faster to put back
    fast: Any = compiled

    class UtcTimestamptzLoader(BaseTzLoader):  # type: ignore[misc]
        timezone = UTC

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            if self.connection is not None and self.connection.info.parameter_status("TimeZone") == "UTC":
                self.load = fast(oid, context).load

    return UtcTimestamptzLoader
