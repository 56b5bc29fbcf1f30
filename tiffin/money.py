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


def money_text(amount: Decimal | str) -> str:
    """An amount as people read it: thousands separators, two decimals (``12,345.67``).
    Every command, page and statement that prints money for people prints it so; a
    string is taken too, as a run's result holds its amounts."""
    return f"{Decimal(amount):,.2f}"


# ISO 4217 currencies whose minor unit is not the hundredth, as Stripe counts them
# (docs.stripe.com/currencies): zero-decimal ones and three-decimal ones. Any other has two.
_ZERO_DECIMAL = frozenset(
    ["bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"]
)
_THREE_DECIMAL = frozenset(["bhd", "jod", "kwd", "omr", "tnd"])


def minor_unit_exponent(currency: str) -> int:
    """Digits after the point of ``currency``'s minor unit: 0 (jpy), 3 (kwd) or 2."""
    code = currency.lower()
    if code in _ZERO_DECIMAL:
        return 0
    if code in _THREE_DECIMAL:
        return 3
    return 2


def to_minor_units(amount: Decimal, currency: str) -> int:
    """``amount`` as a whole number of ``currency``'s minor units (1049.38 inr -> 104938).

    Exact or refused: an amount that is not a whole number of minor units (0.5 jpy,
    1.005 inr) raises ValueError; it is never rounded, since rounding money at the edge
    would pay a different amount than the ledger says.
    """
    scaled = amount.scaleb(minor_unit_exponent(currency))
    if not amount.is_finite() or scaled != scaled.to_integral_value():
        raise ValueError(f"{amount} {currency} is not a whole number of the currency's minor units")
    return int(scaled)
