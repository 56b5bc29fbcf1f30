"""What every peer's task does: note that it started, then the project's own conditional
cancel (``orders_cancel_unaccepted``), so the peers do the same work as Tiffin's
``cancel-stale-order`` handler and only the machinery around it differs."""

from __future__ import annotations

import os

# Celery's Django fix-up closes the task's database connection before and after every task,
# whatever CONN_MAX_AGE says, unless CELERY_DB_REUSE_MAX is set: then it keeps it for that
# many tasks (bench/peers/celery_app.py). BENCH_PEERS_CELERY_DB_REUSE_MAX=0 closes it per task.
CELERY_DB_REUSE_MAX = int(os.environ.get("BENCH_PEERS_CELERY_DB_REUSE_MAX", "1000"))

# One row per start of a peer's task, written in autocommit before the cancel (as Tiffin
# writes a run's ``started`` event before its handler): two rows for one order is a task
# executed twice. Created by bench/peers/cancellations.py in each peer's database.
STARTS_TABLE = """
CREATE TABLE bench_peer_starts (
    id bigserial PRIMARY KEY,
    order_id bigint NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX bench_peer_starts_order ON bench_peer_starts (order_id);
"""


def cancel_order(order_id: int) -> int:
    """Record the start, then cancel the order if it is still placed and past its deadline."""
    from django.db import connection

    from orders.services import orders_cancel_unaccepted

    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_peer_starts (order_id) VALUES (%s)", [order_id])
    return orders_cancel_unaccepted(order_ids=[order_id])
