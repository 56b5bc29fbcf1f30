"""The edge where the ledger's Decimal becomes the provider's integer, and the business
identity every attempt sends: exact or refused, the same whoever computes it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from tiffin.money import to_minor_units
from transfers.models import transfer_identity


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("1049.38", "inr", 104938),
        ("0.01", "usd", 1),
        ("1049.00", "INR", 104900),
        ("1049", "jpy", 1049),
        ("1049.00", "jpy", 1049),
        ("12.345", "kwd", 12345),
        ("12.34", "kwd", 12340),
        ("99999999999.99", "inr", 9999999999999),
    ],
)
def test_it_converts_exactly(amount: str, currency: str, minor: int) -> None:
    assert to_minor_units(Decimal(amount), currency) == minor


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("1049.385", "inr"), ("0.5", "jpy"), ("891.97", "jpy"), ("1.0001", "kwd"), ("NaN", "inr"), ("Infinity", "usd")],
)
def test_it_refuses_what_is_not_a_whole_number_of_minor_units(amount: str, currency: str) -> None:
    with pytest.raises(ValueError, match="not a whole number"):
        to_minor_units(Decimal(amount), currency)


def test_the_identity_is_the_restaurant_and_the_period_start_in_utc() -> None:
    start = datetime(2027, 3, 7, 18, 30, tzinfo=UTC)
    ist = timezone(timedelta(hours=5, minutes=30))
    assert transfer_identity(restaurant_id=7, period_start=start) == "payout-7-20270307T183000Z"
    assert transfer_identity(restaurant_id=7, period_start=start.astimezone(ist)) == "payout-7-20270307T183000Z"
    with pytest.raises(ValueError, match="naive"):
        transfer_identity(restaurant_id=7, period_start=start.replace(tzinfo=None))
