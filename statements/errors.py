"""The errors a caller can cause through the statement services, each with its own message."""

from __future__ import annotations


class StatementError(Exception):
    """A request the statement services refuse; the message is for the person who made it."""
