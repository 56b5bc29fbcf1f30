"""A stand-in for a third-party payment provider: the subset of Stripe's Connect
Transfers API that Tiffin's transfer outbox uses, run as a separate process.

It imports nothing of Tiffin (a test enforces it) and only the standard library, so it
plays the part of a service the project does not control. It honours these of Stripe's
documented semantics, the ones an outbox depends on:

- ``POST /v1/transfers``, ``GET /v1/transfers`` (Stripe's list pagination and the
  ``created``, ``destination`` and ``transfer_group`` filters, newest first) and
  ``GET /v1/transfers/:id``; form-encoded bodies, ``Authorization: Bearer sk_test_...``,
  errors as ``{"error": {"type", "message", "code", "param"}}`` with Stripe's status codes.
- Idempotency keys on POST: a repeated key with the same parameters replays the stored
  response with ``Idempotent-Replayed: true``; a key reused with other parameters or on
  another endpoint is refused (400, ``idempotency_error``); a request while another with
  the same key is in flight gets 409 (``idempotency_key_in_use``); a request refused by
  validation or failing before it executes stores nothing; keys are forgotten after a
  retention (24 hours by default, as Stripe promises at least) on the sandbox's clock.
- State (transfers, keys) lives in one SQLite file, one transaction per request, synced
  to disk on commit: a restart keeps it.

Faults are injected on request (see ``docs/provider-sandbox.md``): commit then time out,
commit then 500, 500 before commit, drop the connection, slow answers, down.
"""
