"""Databases made and dropped for a test, a scenario or a benchmark, on a connection to
the server's maintenance database (autocommit: CREATE and DROP DATABASE refuse a
transaction)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def database_create(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    template: str | None = None,
    file_copy: bool = False,
    owner: str | None = None,
) -> None:
    """Drop ``name`` if it exists (whoever is connected) and create it, empty or as a copy of
    ``template``, owned by role ``owner`` (default: the connection's). ``file_copy`` copies
    the template's files whole after a checkpoint instead of writing them through the WAL
    block by block (minutes for the benchmarks' largest databases). Nothing may be
    connected to the template."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    if file_copy:
        statement += sql.SQL(" STRATEGY FILE_COPY")
    if owner:
        statement += sql.SQL(" OWNER {}").format(sql.Identifier(owner))
    database_drop(conn, name)
    conn.execute(statement)


def database_drop(conn: psycopg.Connection[Any], name: str) -> None:
    """Drop ``name`` if it exists, ending any session still connected to it."""
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
