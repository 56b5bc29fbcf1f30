"""The SQL of the statement outbox that the ORM would write row by row (PostgreSQL only).

The payout pass writes a batch's payouts in one statement (payouts/queries.py); their
statements are written the same way, one INSERT ... SELECT for the batch in the batch's
transaction, as their transfers are (transfers/sql.py). "The payouts just written" are
those of the batch's restaurants created at the pass's instant with no statement yet.

The email is rendered in that statement: the body is ``statements/statement_body.txt``
turned into the format string of PostgreSQL's ``format()`` (``body_format``), each of its
fields a SQL expression that writes what ``statements.services.statement_body`` writes in
Python (``_FIELDS``; SQLite renders in Python). Rendering 40,000 bodies in Python and
sending them back as arrays took three quarters of the statements' time
(docs/benchmark-history.md, benchmark 1); tests/integration/test_statements.py checks the
two renderings agree, byte for byte.
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox.sql import initial_state_columns
from tiffin.db import execute


def _amount(column: str) -> str:
    # tiffin.money.money_text in SQL: thousands separators, two decimals; numeric(17, 2) has
    # 15 digits before the point.
    return f"to_char({column}, 'FM999,999,999,999,990.00')"


def _utc_minute(column: str) -> str:
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI')"


# statements.models.statement_message_id in SQL: <payout-{restaurant}-{period start, UTC}@{domain}>.
_MESSAGE_ID = (
    "'<payout-' || p.restaurant_id || '-' || to_char(p.period_start AT TIME ZONE 'UTC', 'YYYYMMDD\"T\"HH24MISS\"Z\"')"
    " || '@' || %(domain)s || '>'"
)

# Each field of the body's template as ``statement_body`` fills it (``%`` doubled: the
# statement goes through psycopg's parameters). to_char's month names are English whatever
# the server's locale (no TM prefix), as Python's are in the C locale.
_FIELDS = {
    "restaurant": "r.name",
    "week": "to_char(p.week_start_local, 'DD FMMonth YYYY')",
    "zone": "r.timezone",
    "order_count": "to_char(p.order_count, 'FM9,999,999,990')",
    "gross": _amount("p.gross"),
    "commission": _amount("p.commission"),
    "rate": "to_char(p.commission_rate * 100, 'FM990.00') || ' %%'",
    "net": _amount("p.net"),
    "period_start": _utc_minute("p.period_start"),
    "period_end": _utc_minute("p.period_end"),
    "message_id": _MESSAGE_ID,
}


@functools.cache
def body_format(template: str) -> tuple[str, tuple[str, ...]]:
    """``template`` (``str.format_map`` fields, rendered then stripped, plus a newline) as
    the format string of PostgreSQL's ``format()`` and the SQL expression of each ``%s``.
    The template must start and end with text, so stripping it is stripping the render."""
    stripped = template.strip()
    pieces = list(string.Formatter().parse(stripped))
    if not pieces or pieces[0][0] == "" or pieces[-1][1] is not None:
        raise ValueError("the statement template must start and end with text, not a field")
    text, expressions = [], []
    for literal, field, spec, conversion in pieces:
        text.append(literal.replace("%", "%%"))
        if field is None:
            continue
        if spec or conversion or field not in _FIELDS:
            raise ValueError(f"the statement template's field {{{field}}} has no SQL rendering")
        text.append("%s")
        expressions.append(_FIELDS[field])
    return "".join(text) + "\n", tuple(expressions)


@functools.cache
def _insert(expressions: tuple[str, ...]) -> str:
    """One statement per payout just written and without one: the frozen email, pending if
    the restaurant has a statement email (due at once), else waiting for one. The unique
    (restaurant, period start) and message_id keys refuse a second statement for a payout."""
    return f"""
INSERT INTO statements_statement (
    payout_id, restaurant_id, period_start, recipient, subject, body, message_id,
    status, attempts, next_attempt_at, last_error, created_at
)
SELECT p.id, p.restaurant_id, p.period_start, r.statement_email,
       r.name || ': Tiffin statement for the week of ' || to_char(p.week_start_local, 'DD Mon YYYY'),
       format(%(body_format)s, {", ".join(expressions)}),
       {_MESSAGE_ID},
       {initial_state_columns("r.statement_email")}
FROM payouts_payout p
JOIN orders_restaurant r ON r.id = p.restaurant_id
WHERE p.restaurant_id = ANY(%(restaurant_ids)s::bigint[]) AND p.created_at = %(written_at)s
  AND NOT EXISTS (SELECT 1 FROM statements_statement s WHERE s.payout_id = p.id)
ORDER BY p.restaurant_id, p.period_start
"""


@dataclass(frozen=True)
class NewStatement:
    """The frozen columns of one payout's statement, as rendered in Python (SQLite)."""

    payout_id: int
    restaurant_id: int
    period_start: datetime
    recipient: str
    subject: str
    body: str
    message_id: str


def statements_insert_for_payouts(
    *, restaurant_ids: list[int], written_at: datetime, template: str, domain: str, pending: str, waiting: str
) -> int:
    """Write the statements of the payouts written at ``written_at`` for ``restaurant_ids``,
    rendered from ``template`` (``_insert``); return how many."""
    text, expressions = body_format(template)
    params: dict[str, Any] = {
        "restaurant_ids": restaurant_ids,
        "written_at": written_at,
        "body_format": text,
        "domain": domain,
        "pending": pending,
        "waiting": waiting,
    }
    return execute(_insert(expressions), params)
