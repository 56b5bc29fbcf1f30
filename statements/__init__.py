"""The weekly statement email: an outbox row per payout, frozen with the payout, and
``send-statements``, which mails each at least once with a stable Message-ID
(docs/statements.md). It imports ``outbox``, ``payouts``, ``orders``, the engine,
``operations`` and the core."""
