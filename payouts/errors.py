"""The errors a caller can cause through the payout services, each with its own message."""

from __future__ import annotations


class PayoutError(Exception):
    """A request the payout services refuse; the message is for the person who made it."""
