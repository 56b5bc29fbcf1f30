"""The procrastinate peer's task, found by procrastinate's Django autodiscovery (a ``tasks``
module of an installed app: bench.peers, installed by bench/peers/settings.py)."""

from __future__ import annotations

from procrastinate.contrib.django import app

from bench.peers.record import cancel_order


@app.task(name="bench-peers-cancel-order")
def procrastinate_cancel_order(order_id: int) -> int:
    return cancel_order(order_id)
