"""The payout statements, pinned: a change to the money SQL shows up as a change to these
files in review (rewrite them with ``TIFFIN_PIN_SQL=1``), and every named parameter a
statement uses is one ``payouts.sql`` passes."""

from __future__ import annotations

import os
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from payouts import sql
from payouts.weeks import BusinessWeek

PINNED = Path(__file__).parent / "sql"
WEEK = BusinessWeek(
    "Asia/Kolkata", date(2026, 3, 2), datetime(2026, 3, 1, 18, 30, tzinfo=UTC), datetime(2026, 3, 8, 18, 30, tzinfo=UTC)
)


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_the_payout_insert_of_each_backend_is_the_pinned_statement(vendor):
    pinned = PINNED / f"payouts_insert_{vendor}.sql"
    statement = sql._INSERT[vendor].strip() + "\n"
    if os.environ.get("TIFFIN_PIN_SQL") == "1":
        pinned.write_text(statement)
    assert statement == pinned.read_text(), f"{pinned.name} differs: review the change, then TIFFIN_PIN_SQL=1"


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_every_parameter_the_statement_names_is_passed(vendor, monkeypatch):
    monkeypatch.setattr(sql, "_vendor", lambda: vendor)
    params = sql._params(batch=sql.RestaurantBatch(1, 9), weeks=[WEEK], job_run_id=None, fence=None, now=None)
    named = set(re.findall(r"%\((\w+)\)s", sql._INSERT[vendor]))
    assert named == set(params), named ^ set(params)
