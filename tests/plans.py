"""The statements a call runs on one table, and what their plans read, run for real with
their own parameters and then undone: the plan tests (test_job_run_plans,
test_pending_order_plans) hold every statement about a few rows to reading those rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.db import connection, transaction


def statements_on(table: str, call: Callable[[], Any], *, ignore: str = "") -> list[tuple[str, Any]]:
    """The statements naming ``table`` (and not ``ignore``, a name containing it) that
    ``call`` runs, with their parameters (undone)."""
    seen: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if table in sql and not (ignore and ignore in sql):
            seen.append((sql, params))
        return execute(sql, params, many, context)

    with transaction.atomic():
        with connection.execute_wrapper(capture):
            call()
        transaction.set_rollback(True)
    assert seen, f"the call ran no statement on {table}"
    return seen


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def _scans(table: str, sql: str, params: Any, *, options: str) -> list[dict[str, Any]]:
    """The plan nodes that scan ``table`` in ``EXPLAIN (<options>, FORMAT JSON) sql``, run
    for real, then undone."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({options}, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True)
    return [
        node
        for node in plan_nodes(plan[0]["Plan"])
        if node.get("Relation Name") == table and node["Node Type"] != "ModifyTable"
    ]


def _scan_name(node: dict[str, Any]) -> str:
    return f"{node['Node Type']} {node.get('Index Name', '')}"


def rows_read(table: str, sql: str, params: Any) -> list[tuple[str, int]]:
    """Each scan of ``table`` in the statement's plan, with the rows it read: those it
    returned and those its filter threw away. A condition on an index's second column
    counts no row "removed by filter" though the scan walks every entry: ``pages_read``
    catches that."""
    return [
        (_scan_name(node), (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"])
        for node in _scans(table, sql, params, options="ANALYZE")
    ]


def pages_read(table: str, sql: str, params: Any) -> list[tuple[str, int]]:
    """Each scan of ``table`` in the statement's plan, with the pages it touched (its
    index's and the table's)."""
    return [
        (_scan_name(node), node["Shared Hit Blocks"] + node["Shared Read Blocks"])
        for node in _scans(table, sql, params, options="ANALYZE, BUFFERS")
    ]
