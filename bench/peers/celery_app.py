"""The Celery peer: one app on Redis, one task. The worker is
``celery -A bench.peers.celery_app worker --pool prefork``; Celery's Django fix-up sets
Django up in it from DJANGO_SETTINGS_MODULE (the project's settings, unchanged).

The broker is database 9 of the shared Redis unless BENCH_PEERS_REDIS_URL says otherwise;
bench/peers/cancellations.py flushes that database, and only it, before the Celery side.
"""

from __future__ import annotations

import os

from celery import Celery

from bench.peers.record import CELERY_DB_REUSE_MAX, cancel_order

REDIS_URL = os.environ.get("BENCH_PEERS_REDIS_URL", "redis://127.0.0.1:6379/9")

app = Celery("tiffin_bench_peers", broker=REDIS_URL)
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    CELERY_DB_REUSE_MAX=CELERY_DB_REUSE_MAX or None,
    # Celery's defaults otherwise (early acknowledgement, prefetch multiplier 4, Redis's
    # visibility timeout of an hour): what a team gets by following its documentation.
)


@app.task(name="bench-peers-cancel-order")
def celery_cancel_order(order_id: int) -> int:
    return cancel_order(order_id)
