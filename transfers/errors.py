"""The errors a caller can cause through the transfer services, each with its own message."""

from __future__ import annotations


class TransferError(Exception):
    """A request the transfer services refuse; the message is for the person who made it."""


class InexactAmountError(TransferError):
    """An amount that is not a whole number of the currency's minor units: refused, never rounded."""
