"""The errors a caller can cause through the shared outbox services."""

from __future__ import annotations


class OutboxError(Exception):
    """A request on an outbox row refused; the message is for the person who made it."""
