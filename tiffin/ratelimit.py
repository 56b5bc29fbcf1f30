"""A rate cap of so many requests a minute per client, counted in the database, so every process of every server
shares one count per client (a local-memory cache counts per process: with two gunicorn
workers a cap of 120 a minute let 230 through).

``rate_exceeded`` adds this request to its client's count for the current window, in one
atomic upsert, and says whether the count is now past the cap:

1. the first request of a window (no row, or the row is from an earlier window) sets the
   count to 1 and the window to this one;
2. each later request of the same window adds 1; concurrent requests each get their own
   count, from the row lock the upsert takes, so no request is missed;
3. a request whose window is older than the row's (a slower server's clock) counts in the
   row's window;
4. the request that starts a window also deletes the rows of windows that are over (served
   by the request_counts_window index), so the table holds about one row per client active
   in the last minute. Every cap's window is the same minute, so this is right for all.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tiffin.db import execute, fetch

# 1.-3.: one statement on PostgreSQL and SQLite (3.35+) alike.
_COUNT = """
INSERT INTO request_counts (bucket, window_start, count) VALUES (%s, %s, 1)
ON CONFLICT (bucket) DO UPDATE SET
    count = CASE WHEN request_counts.window_start >= excluded.window_start
                 THEN request_counts.count + 1 ELSE 1 END,
    window_start = CASE WHEN request_counts.window_start >= excluded.window_start
                        THEN request_counts.window_start ELSE excluded.window_start END
RETURNING count
"""
# 4.: the rows of windows that are over (request_counts_window).
_PRUNE = "DELETE FROM request_counts WHERE window_start < %s"


WINDOW = timedelta(minutes=1)


def rate_exceeded(*, cap: str, client: str, limit: int, now: datetime) -> bool:
    """Count this request of ``client`` against ``cap`` (the cap's name, e.g.
    ``cron-explainer``); True when it is past ``limit`` requests in the current minute."""
    window_start = window_start_of(now)
    [(count,)] = fetch(_COUNT, [f"{cap}:{client}"[:200], window_start])
    if count == 1:
        execute(_PRUNE, [window_start])
    return bool(count > limit)


def window_start_of(now: datetime) -> datetime:
    """The start of the window (the UTC minute) holding ``now``."""
    seconds = WINDOW.total_seconds()
    return datetime.fromtimestamp(now.timestamp() // seconds * seconds, tz=UTC)
