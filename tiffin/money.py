"""Money: a Decimal in cents, never a float."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

CENT = Decimal("0.01")


def cents(value: Decimal | None) -> Decimal:
    """A sum the database returned, in cents (None, the sum of no rows, is zero).

    PostgreSQL sums NUMERIC exactly. SQLite sums in floating point; the error stays far
    below half a cent for any realistic number of rows, so rounding to cents (half-even)
    restores the exact sum.
    """
    return (value or Decimal("0")).quantize(CENT, rounding=ROUND_HALF_EVEN)
