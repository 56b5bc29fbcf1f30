"""The payout statements, read from ``payouts.queries`` and ``payouts.queries_sqlite``
themselves: a change to the money SQL is a change to those modules in review. These check
what a reviewer of such a change could miss: the dry run selects exactly what the INSERT
writes, the INSERT writes the model's columns (one expression each) and its arbiter is the
model's unique constraint, the lock takes the batch the INSERT pays, and every parameter a
statement names is one ``payouts.sql`` passes. Each backend's statements run in
tests/integration/test_payouts.py."""

from __future__ import annotations

import re
import textwrap
from datetime import UTC, date, datetime

import pytest
from django.db import connection
from django.db.models import UniqueConstraint

from payouts import queries, queries_sqlite, sql
from payouts.models import Payout
from payouts.weeks import BusinessWeek

WEEK = BusinessWeek(
    "Asia/Kolkata", date(2026, 3, 2), datetime(2026, 3, 1, 18, 30, tzinfo=UTC), datetime(2026, 3, 8, 18, 30, tzinfo=UTC)
)
# Each backend's payout statement and its dry run.
STATEMENTS = {
    "postgresql": (queries.INSERT_DUE_PAYOUTS, queries.SELECT_DUE_PAYOUTS),
    "sqlite": (queries_sqlite.INSERT_DUE_PAYOUTS, queries_sqlite.SELECT_DUE_PAYOUTS),
}
VENDORS = list(STATEMENTS)


def _names(listed: str) -> list[str]:
    return [name.strip() for name in listed.split(",")]


def _inner_select(insert: str) -> str:
    (inner,) = re.findall(r"^SELECT \* FROM \(\n(.*)\n\) due WHERE true$", insert, re.S | re.M)
    return textwrap.dedent(inner)


def _select_list(select: str) -> list[str]:
    """The expressions of the outermost SELECT list, split at its top-level commas."""
    text = select.strip().removeprefix("SELECT ")
    expressions, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char == ",":
            expressions.append(text[start:at].strip())
            start = at + 1
        elif depth == 0 and text.startswith("\nFROM", at):
            return [*expressions, text[start:at].strip()]
    raise AssertionError("no FROM closes the SELECT list")


@pytest.mark.parametrize("vendor", VENDORS)
def test_the_dry_run_is_the_inserts_select_word_for_word(vendor):
    insert, select = STATEMENTS[vendor]
    assert _inner_select(insert) == select.strip("\n")


@pytest.mark.parametrize("vendor", VENDORS)
def test_the_insert_writes_each_column_of_a_payout_but_its_id_from_one_expression(vendor):
    insert, select = STATEMENTS[vendor]
    (listed,) = re.findall(r"INSERT INTO payouts_payout \((.*?)\)", insert, re.S)
    columns = _names(listed)
    assert sorted(columns) == sorted(f.column for f in Payout._meta.concrete_fields if not f.primary_key)
    expressions = _select_list(select)
    assert len(expressions) == len(columns), expressions
    # The run's own values come last, each from its parameter.
    passed = [re.fullmatch(r"%\((\w+)\)s(?:::\w+)?", e).group(1) for e in expressions[-4:]]  # type: ignore[union-attr]
    assert dict(zip(columns[-4:], passed, strict=True)) == {
        "tzdata_version": "tzdata_version",
        "job_run_id": "job_run_id",
        "fence": "fence",
        "created_at": "now",
    }


@pytest.mark.parametrize("vendor", VENDORS)
def test_the_arbiter_is_the_one_payout_per_restaurant_week_constraint(vendor):
    unique = [c for c in Payout._meta.constraints if isinstance(c, UniqueConstraint)]
    (constraint,) = [c for c in unique if c.name == "payout_one_per_restaurant_week"]
    column = {field.name: field.column for field in Payout._meta.concrete_fields}
    columns = ", ".join(str(column[name]) for name in constraint.fields)
    insert, _ = STATEMENTS[vendor]
    assert insert.strip().endswith(f"ON CONFLICT ({columns}) DO NOTHING\nRETURNING restaurant_id")


def test_the_lock_takes_the_restaurants_the_insert_pays_in_id_order():
    def collapsed(text: str) -> str:
        return " ".join(text.split()).replace("r.id", "id")

    (paid,) = re.findall(r"FROM orders_restaurant r\n\s+WHERE (.*?)\n\s+OFFSET 0", queries.INSERT_DUE_PAYOUTS, re.S)
    (locked,) = re.findall(r"WHERE (.*)\nORDER BY id FOR NO KEY UPDATE\n$", queries.LOCK_BATCH, re.S)
    assert collapsed(locked) == collapsed(paid)


@pytest.mark.parametrize("vendor", VENDORS)
def test_every_parameter_the_statements_name_is_passed(vendor, monkeypatch):
    monkeypatch.setattr(connection, "vendor", vendor)  # the parameters' form is the backend's
    params = sql._params(batch=sql.RestaurantBatch(1, 9), weeks=[WEEK], job_run_id=None, fence=None, now=None)
    statements = [*STATEMENTS[vendor], *([queries.LOCK_BATCH] if vendor == "postgresql" else [])]
    for statement in statements:
        named = set(re.findall(r"%\((\w+)\)s", statement))
        assert named <= set(params), named - set(params)
    insert, _ = STATEMENTS[vendor]
    assert set(re.findall(r"%\((\w+)\)s", insert)) == set(params)
