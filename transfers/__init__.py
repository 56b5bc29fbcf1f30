"""Money that leaves: the transfer outbox (one row per payout with a positive net), the
sender (``send-transfers``) that sends each with an idempotency key from the business
identity through the official ``stripe`` library, and the daily reconciliation
(``reconcile-transfers``) against the provider's own list (docs/transfers.md). It imports
``outbox``, ``payouts``, the engine, ``operations`` and the core."""
