"""What the two outboxes share: the transfer outbox (``transfers``, money to the payment
provider) and the statement outbox (``statements``, the weekly email).

Each holds one row per payout, written in the payout's transaction, and a sender job that
takes the due rows and records what became of each. The row's life is the same in both:

- ``waiting`` (no destination yet: a provider account, an email address), then
  ``pending`` once it has one (``outbox_release_waiting``);
- an attempt begins under the sender's fence (``outbox_attempts_begin``): the row is taken
  if still pending and due, the attempt counted, and ``next_attempt_at`` pushed past the
  call's lease plus the backoff (``outbox_backoff``), so a dead worker's row is due again;
- the answer is recorded under the fence, each write conditional on the row still being
  pending: ``sent`` (``outbox_record_sent``), an error noted and retried at the time the
  attempt set (``outbox_note_error``), or given up: ``stopped`` for a refusal no retry can
  fix, which a person puts back with the same identity (``outbox_give_up``,
  ``outbox_retry``).

The shared part: the row's common columns (``models.OutboxRow``), its reads and writes
(``selectors``, ``services``), the sender job's schedule (``jobs``), and the read-only
admin with its retry action (``admin``). What differs stays in each app: the call (the
``stripe`` library, Django's SMTP backend), how its errors are judged, the lease, and
what a stopped row alerts.
"""
