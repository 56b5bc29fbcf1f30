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


# Begin an attempt on each of the given rows still pending and due (PostgreSQL): lock them
# (SKIP LOCKED: another sender is taking the others), count the attempt and push
# ``next_attempt_at`` to the entry of ``%(due)s`` for the attempt's number (the last entry
# for any later one), in one statement, returning each row as updated and its previous
# ``last_attempt_at``. ``{table}``, ``{columns}`` (the model's, qualified by ``o.``) and
# ``{stamps}`` (``, col = COALESCE(o.col, %(now)s)`` per column set once) are filled in.
ATTEMPTS_BEGIN = """
WITH taken AS (
    SELECT id, attempts, last_attempt_at FROM {table}
    WHERE id = ANY(%(ids)s::bigint[]) AND status = %(pending)s AND next_attempt_at <= %(now)s
    ORDER BY id
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS o
SET attempts = taken.attempts + 1, last_attempt_at = %(now)s,
    next_attempt_at = (%(due)s::timestamptz[])[LEAST(taken.attempts + 1, %(steps)s)]{stamps}
FROM taken
WHERE o.id = taken.id
RETURNING {columns}, taken.last_attempt_at AS previous_attempt_at
"""
