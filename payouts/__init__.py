"""The weekly payout ledger: each restaurant's business weeks in its own zone, paid once,
in one contiguous sequence (``weeks``, ``queries``, ``sql``; SQLite's statements in
``queries_sqlite``), by ``weekly-payouts`` and
``manage.py catch_up_payouts``. A payout writes its transfer (``transfers``) and its
statement (``statements``) in its own transaction. It imports ``orders``, the engine,
``operations`` (its invariant checks report through the missed-run check's alerts) and the
core."""
