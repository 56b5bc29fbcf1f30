"""The peers Tiffin's delayed cancellation is measured beside (``make bench-peers``):
procrastinate through its Django integration and Celery 5 on Redis.

Benchmark-only: their packages are pinned in requirements-peers.txt and installed into a
virtualenv of their own (.venv-peers), never the product's; nothing outside bench/peers/
imports this package, and the project's INSTALLED_APPS do not change
(``bench.peers.settings`` adds procrastinate for the peers' processes only).
"""
