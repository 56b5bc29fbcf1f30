"""SQL the outboxes' bulk INSERTs share (PostgreSQL; transfers/sql.py, statements/sql.py)."""

from __future__ import annotations


def initial_state_columns(address: str) -> str:
    """The select list of a new row's ``status, attempts, next_attempt_at, last_error,
    created_at``, given ``address``, the SQL expression of where it goes (a provider
    account, an email address): pending and due at once if it is set, else waiting for
    one. Named parameters: ``pending``, ``waiting``, ``written_at``."""
    return (
        f"CASE WHEN {address} = '' THEN %(waiting)s ELSE %(pending)s END, 0, "
        f"CASE WHEN {address} = '' THEN NULL ELSE %(written_at)s::timestamptz END, '', %(written_at)s"
    )
